//! `decide`'s input table, built straight from a `PolicyInput` with the
//! Lua C API. Through mlua's serde serializer this cost about 70k
//! instructions per decision (a Rust-to-Lua round trip per field), through
//! small trusted Lua constructors called with the fields as arguments 42k
//! (six protected calls, every argument converted, the constructors run
//! under the instruction hook); this way about 31k, of which the table
//! writes are half and the garbage collector steps that the allocations
//! trigger a sixth (callgrind, BENCHMARKS.md). The table is the same,
//! field for field, as the serde one (a test compares them), and fresh on
//! every call.

use super::input::{AccumulatorInput, N7SessionInput, PolicyInput, RuleFailure};
use mlua::serde::SerializeOptions;
use mlua::{ffi, Lua, LuaSerdeExt, Value};
use std::ffi::CStr;
use std::os::raw::c_int;

/// Stack slots the deepest write needs (input, usage, accumulators, one
/// accumulator, a value) with room to spare.
const STACK_NEEDED: c_int = 16;

/// Bytes the Lua tables and strings made from `attributes` take, roughly
/// from above (Lua 5.4 on 64-bit: a string is its bytes plus a 24-byte
/// header, a table slot 32 bytes, a table 56). Cheap next to building
/// them, so it runs before every build that has attributes.
pub(super) fn attributes_cost(
    attributes: &std::collections::BTreeMap<String, serde_json::Value>,
) -> usize {
    fn value(v: &serde_json::Value) -> usize {
        use serde_json::Value as J;
        match v {
            J::Null | J::Bool(_) | J::Number(_) => 0,
            J::String(s) => 24 + s.len(),
            J::Array(items) => 56 + items.iter().map(|i| 32 + value(i)).sum::<usize>(),
            J::Object(map) => {
                56 + map
                    .iter()
                    .map(|(k, v)| 32 + 24 + k.len() + value(v))
                    .sum::<usize>()
            }
        }
    }
    56 + attributes
        .iter()
        .map(|(k, v)| 32 + 24 + k.len() + value(v))
        .sum::<usize>()
}

/// A fresh input table for `i`; `options` are those of the serde path
/// (used for the free-form subscriber attributes only).
pub(super) fn build(lua: &Lua, i: &PolicyInput, options: SerializeOptions) -> mlua::Result<Value> {
    let attributes = i.subscriber.view().attributes;
    let attributes = match attributes.is_empty() {
        true => Value::Nil,
        false => match lua.to_value_with(attributes, options)? {
            t @ Value::Table(_) => t,
            _ => Value::Nil,
        },
    };
    // SAFETY: inside `exec_raw` the closure is a protected C call with the
    // attributes (a table or nil) as argument 1. It pushes and sets only
    // fresh tables (no metatable, so no metamethod runs) and holds nothing
    // that needs dropping while it calls Lua, so a memory error, the only
    // error these calls can raise (the memory limit is off here), unwinds
    // it as mlua's own protected calls are unwound.
    let built = unsafe {
        lua.exec_raw::<Value>(attributes, |state| {
            if ffi::lua_checkstack(state, STACK_NEEDED) != 0 {
                push_input(state, i);
                // The result is the one value left: the table.
                ffi::lua_replace(state, 1);
            } else {
                ffi::lua_settop(state, 0);
            }
        })
    }?;
    match built {
        t @ Value::Table(_) => Ok(t),
        _ => Err(mlua::Error::RuntimeError(
            "no Lua stack left to build the input table".into(),
        )),
    }
}

/// Pushes the input table; argument 1 holds the attributes or nil.
unsafe fn push_input(state: *mut ffi::lua_State, i: &PolicyInput) {
    ffi::lua_createtable(state, 0, 8);

    let sub = i.subscriber.view();
    ffi::lua_createtable(state, 0, 6);
    set_bool(state, c"known", sub.known);
    set_opt_str(state, c"imsi", sub.imsi);
    set_opt_str(state, c"msisdn", sub.msisdn);
    set_opt_str(state, c"plan", sub.plan);
    push_strings(state, sub.services);
    ffi::lua_setfield(state, -2, c"services".as_ptr());
    if ffi::lua_type(state, 1) == ffi::LUA_TTABLE {
        ffi::lua_pushvalue(state, 1);
    } else {
        ffi::lua_createtable(state, 0, 0);
    }
    ffi::lua_setfield(state, -2, c"attributes".as_ptr());
    ffi::lua_setfield(state, -2, c"subscriber".as_ptr());

    let s = &i.session;
    ffi::lua_createtable(state, 0, 11);
    set_opt_str(state, c"apn", s.apn.as_deref());
    set_opt_str(state, c"rat", s.rat.as_deref());
    set_opt_str(state, c"ip_can_type", s.ip_can_type.as_deref());
    if let Some(a) = &s.ue_ipv4 {
        a.with_text(|text| set_str(state, c"ue_ipv4", text));
    }
    set_opt_str(state, c"ue_ipv6_prefix", s.ue_ipv6_prefix.as_deref());
    set_opt_str(state, c"location", s.location.as_deref());
    set_opt_str(state, c"ms_timezone", s.ms_timezone.as_deref());
    set_opt_str(state, c"device", s.device.as_deref());
    set_str(state, c"pcef", &s.pcef);
    s.installed.with_names(|names| push_strings(state, names));
    ffi::lua_setfield(state, -2, c"installed".as_ptr());
    push_rule_failures(state, &s.rule_failures);
    ffi::lua_setfield(state, -2, c"rule_failures".as_ptr());
    if let Some(n7) = &s.n7 {
        push_n7(state, n7);
        ffi::lua_setfield(state, -2, c"n7".as_ptr());
    }
    ffi::lua_setfield(state, -2, c"session".as_ptr());

    let t = &i.time;
    ffi::lua_createtable(state, 0, 4);
    set_int(state, c"hour", i64::from(t.hour));
    set_int(state, c"minute", i64::from(t.minute));
    set_int(state, c"weekday", i64::from(t.weekday));
    set_str(state, c"date", &t.date);
    ffi::lua_setfield(state, -2, c"time".as_ptr());

    ffi::lua_createtable(state, 0, 1);
    set_int(state, c"congestion", i64::from(i.network.congestion));
    ffi::lua_setfield(state, -2, c"network".as_ptr());

    ffi::lua_createtable(state, 0, 2);
    ffi::lua_createtable(state, 0, size_hint(i.usage.accumulators.len()));
    for (name, a) in &i.usage.accumulators {
        push_accumulator(state, a);
        set_top_as(state, name);
    }
    ffi::lua_setfield(state, -2, c"accumulators".as_ptr());
    if !i.usage.unknown_keys.is_empty() {
        push_strings(state, &i.usage.unknown_keys);
        ffi::lua_setfield(state, -2, c"unknown_keys".as_ptr());
    }
    ffi::lua_setfield(state, -2, c"usage".as_ptr());

    push_strings(state, &i.applications);
    ffi::lua_setfield(state, -2, c"applications".as_ptr());

    if !i.spending.is_empty() {
        ffi::lua_createtable(state, 0, size_hint(i.spending.len()));
        for (counter, status) in &i.spending {
            push_str(state, status);
            set_top_as(state, counter);
        }
        ffi::lua_setfield(state, -2, c"spending".as_ptr());
    }
}

fn size_hint(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(0)
}

unsafe fn push_str(state: *mut ffi::lua_State, v: &str) {
    ffi::lua_pushlstring(state, v.as_ptr().cast(), v.len());
}

/// `t[key] = v` on the table below the value on top, with a key that is
/// not a C string literal (a map's key).
unsafe fn set_top_as(state: *mut ffi::lua_State, key: &str) {
    push_str(state, key);
    ffi::lua_insert(state, -2);
    ffi::lua_rawset(state, -3);
}

unsafe fn set_str(state: *mut ffi::lua_State, key: &CStr, v: &str) {
    push_str(state, v);
    ffi::lua_setfield(state, -2, key.as_ptr());
}

unsafe fn set_opt_str(state: *mut ffi::lua_State, key: &CStr, v: Option<&str>) {
    if let Some(v) = v {
        set_str(state, key, v);
    }
}

unsafe fn set_int(state: *mut ffi::lua_State, key: &CStr, v: i64) {
    ffi::lua_pushinteger(state, v);
    ffi::lua_setfield(state, -2, key.as_ptr());
}

/// As mlua converts a `u64`: an integer when it fits, else a float.
unsafe fn set_u64(state: *mut ffi::lua_State, key: &CStr, v: u64) {
    match i64::try_from(v) {
        Ok(n) => ffi::lua_pushinteger(state, n),
        Err(_) => ffi::lua_pushnumber(state, v as f64),
    }
    ffi::lua_setfield(state, -2, key.as_ptr());
}

unsafe fn set_bool(state: *mut ffi::lua_State, key: &CStr, v: bool) {
    ffi::lua_pushboolean(state, c_int::from(v));
    ffi::lua_setfield(state, -2, key.as_ptr());
}

/// Pushes a list of strings.
unsafe fn push_strings(state: *mut ffi::lua_State, items: &[impl AsRef<str>]) {
    ffi::lua_createtable(state, size_hint(items.len()), 0);
    for (n, s) in (1..).zip(items) {
        push_str(state, s.as_ref());
        ffi::lua_rawseti(state, -2, n);
    }
}

unsafe fn push_accumulator(state: *mut ffi::lua_State, a: &AccumulatorInput) {
    ffi::lua_createtable(state, 0, 4);
    set_u64(state, c"used_mb", a.used_mb);
    if let Some(q) = a.quota_mb {
        set_u64(state, c"quota_mb", q);
    }
    if let Some(p) = a.percent {
        set_u64(state, c"percent", p);
    }
    set_bool(state, c"exhausted", a.exhausted);
}

/// A PDU session's N7 facts as a table (absent fields left out).
unsafe fn push_n7(state: *mut ffi::lua_State, n: &N7SessionInput) {
    ffi::lua_createtable(state, 0, 13);
    set_opt_str(state, c"access_type", n.access_type.as_deref());
    set_str(state, c"supi", &n.supi);
    set_opt_str(state, c"gpsi", n.gpsi.as_deref());
    set_int(state, c"pdu_session_id", i64::from(n.pdu_session_id));
    set_str(state, c"pdu_session_type", &n.pdu_session_type);
    set_str(state, c"dnn", &n.dnn);
    set_int(state, c"sst", i64::from(n.sst));
    set_opt_str(state, c"sd", n.sd.as_deref());
    set_opt_str(state, c"serving_network", n.serving_network.as_deref());
    if let Some(v) = n.subscribed_ambr_ul {
        set_u64(state, c"subscribed_ambr_ul", v);
    }
    if let Some(v) = n.subscribed_ambr_dl {
        set_u64(state, c"subscribed_ambr_dl", v);
    }
    if let Some(v) = n.subscribed_5qi {
        set_int(state, c"subscribed_5qi", i64::from(v));
    }
}

unsafe fn push_rule_failures(state: *mut ffi::lua_State, failures: &[RuleFailure]) {
    ffi::lua_createtable(state, size_hint(failures.len()), 0);
    for (n, f) in (1..).zip(failures) {
        ffi::lua_createtable(state, 0, 3);
        set_str(state, c"rule", &f.rule);
        set_int(state, c"status", i64::from(f.status));
        if let Some(code) = f.code {
            set_int(state, c"code", i64::from(code));
        }
        ffi::lua_rawseti(state, -2, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::input::tests::every_field_filled;
    use mlua::Table;

    /// Deep equality of two Lua values, with integer and float kept apart
    /// (a policy sees the difference through math.type).
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Table(x), Value::Table(y)) => {
                let count = |t: &Table| t.pairs::<Value, Value>().count();
                count(x) == count(y)
                    && x.pairs::<Value, Value>().all(|kv| {
                        kv.is_ok_and(|(k, v)| y.raw_get::<Value>(k).is_ok_and(|w| same(&v, &w)))
                    })
                    && x.metatable().is_none()
                    && y.metatable().is_none()
            }
            (Value::Integer(x), Value::Integer(y)) => x == y,
            (Value::Number(x), Value::Number(y)) => x.to_bits() == y.to_bits(),
            (Value::String(x), Value::String(y)) => x.as_bytes() == y.as_bytes(),
            (Value::Boolean(x), Value::Boolean(y)) => x == y,
            (Value::Nil, Value::Nil) => true,
            _ => false,
        }
    }

    #[test]
    fn the_table_is_the_serde_table() {
        let lua = Lua::new();
        let options = crate::policy::sandbox::serialize_options();
        let mut cases: Vec<PolicyInput> = crate::policy::engine::sample_inputs()
            .into_iter()
            .map(|(_, i)| i)
            .collect();
        cases.push(PolicyInput::default());
        cases.push(every_field_filled());
        for input in &cases {
            let ours = build(&lua, input, options).expect("builds");
            let serde = lua.to_value_with(input, options).expect("serializes");
            assert!(same(&ours, &serde), "differs for {input:?}");
        }
        // And the comparison does see a difference.
        let mut other = every_field_filled();
        other
            .usage
            .accumulators
            .get_mut("daily")
            .expect("daily")
            .used_mb = 8;
        let ours = build(&lua, &other, options).expect("builds");
        let serde = lua
            .to_value_with(&every_field_filled(), options)
            .expect("serializes");
        assert!(!same(&ours, &serde));
    }
}
