//! Reads the table `decide` returned as a `Decision`, walking it with the
//! Lua C API. Through mlua's serde deserializer the same read cost about
//! 53k instructions per decision, through mlua's Table API 32k (a
//! protected call per table, a registry reference per value); this way
//! about 11k (callgrind, BENCHMARKS.md).
//!
//! Only the plain shape is read here: every field known, integers where
//! numbers are wanted, strings where text is. Anything else (a float such
//! as `dl * 1.5`, an unknown field, a wrong type, a hole in a list)
//! answers `None` and the caller reads the table through serde, which
//! accepts or refuses it exactly as before and words the error. So this
//! reader may refuse what serde accepts, but must never accept what serde
//! refuses or read a field differently (the tests compare the two). It
//! reads as the serde path does: struct tables by their raw pairs (`next`),
//! lists by the raw values at 1..=raw length.

use super::decision::{AdcRule, Ambr, Arp, BearerQos, Decision, Reject, RuleDefinition, RuleQos};
use super::validity::{AnyWord, MbRange, UsageRange, UsageValidity, Validity};
use mlua::{ffi, Lua, Value};
use std::os::raw::c_int;

/// Stack slots the deepest read needs (decision, list, definition, QoS,
/// ARP: a key and a value each) with room to spare.
const STACK_NEEDED: c_int = 24;

/// The table is not of the plain shape; the serde path decides.
struct NotPlain;

type Read<T> = Result<T, NotPlain>;

/// The decision in `ret`, or `None` when only the serde path may read it.
pub(super) fn read_decision(lua: &Lua, ret: &Value) -> Option<Decision> {
    let Value::Table(t) = ret else {
        return None;
    };
    let mut read = None;
    // SAFETY: inside `exec_raw` the table is argument 1 of a protected C
    // call; `Slot` uses only C API functions that never raise a Lua error
    // (so no longjmp crosses Rust frames) and never allocate in Lua, and
    // it keeps every value it reads on the stack while it borrows it.
    let called = unsafe {
        lua.exec_raw::<()>(t, |state| {
            if ffi::lua_checkstack(state, STACK_NEEDED) != 0 {
                read = decision(Slot { state, idx: 1 }).ok();
            }
        })
    };
    called.ok().and(read)
}

fn decision(t: Slot) -> Read<Decision> {
    let mut d = Decision::default();
    t.fields(|key, v| {
        match key {
            b"rules" => d.rules = v.list(Slot::string)?,
            b"base_names" => d.base_names = v.list(Slot::string)?,
            b"definitions" => d.definitions = v.list(|v| rule_definition(v.table()?))?,
            b"apn_ambr" => d.apn_ambr = Some(ambr(v.table()?)?),
            b"default_bearer_qos" => d.default_bearer_qos = Some(bearer_qos(v.table()?)?),
            b"event_triggers" => d.event_triggers = v.list(Slot::u32)?,
            b"revalidation_secs" => d.revalidation_secs = Some(v.u64()?),
            b"reject" => d.reject = Some(reject(v.table()?)?),
            b"monitoring" => d.monitoring = v.list(Slot::string)?,
            b"adc" => d.adc = v.list(|v| adc_rule(v.table()?))?,
            b"spending_counters" => d.spending_counters = v.list(Slot::string)?,
            b"valid" => d.valid = Some(validity(v.table()?)?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(d)
}

fn rule_definition(t: Slot) -> Read<RuleDefinition> {
    let mut name = None;
    let mut r = RuleDefinition::default();
    t.fields(|key, v| {
        match key {
            b"name" => name = Some(v.string()?),
            b"flows" => r.flows = v.list(Slot::string)?,
            b"flow_status" => r.flow_status = Some(v.u32()?),
            b"qos" => r.qos = Some(rule_qos(v.table()?)?),
            b"precedence" => r.precedence = Some(v.u32()?),
            b"rating_group" => r.rating_group = Some(v.u32()?),
            b"service_identifier" => r.service_identifier = Some(v.u32()?),
            b"online" => r.online = Some(v.boolean()?),
            b"offline" => r.offline = Some(v.boolean()?),
            b"monitoring_key" => r.monitoring_key = Some(v.string()?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    r.name = name.ok_or(NotPlain)?;
    Ok(r)
}

fn rule_qos(t: Slot) -> Read<RuleQos> {
    let mut qci = None;
    let mut q = RuleQos {
        qci: 0,
        arp: None,
        mbr_ul: None,
        mbr_dl: None,
        gbr_ul: None,
        gbr_dl: None,
    };
    t.fields(|key, v| {
        match key {
            b"qci" => qci = Some(v.u32()?),
            b"arp" => q.arp = Some(arp(v.table()?)?),
            b"mbr_ul" => q.mbr_ul = Some(v.u32()?),
            b"mbr_dl" => q.mbr_dl = Some(v.u32()?),
            b"gbr_ul" => q.gbr_ul = Some(v.u32()?),
            b"gbr_dl" => q.gbr_dl = Some(v.u32()?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    q.qci = qci.ok_or(NotPlain)?;
    Ok(q)
}

fn arp(t: Slot) -> Read<Arp> {
    let mut priority = None;
    // The serde defaults of the two flags.
    let mut may_preempt = false;
    let mut preemptable = true;
    t.fields(|key, v| {
        match key {
            b"priority" => priority = Some(v.u32()?),
            b"may_preempt" => may_preempt = v.boolean()?,
            b"preemptable" => preemptable = v.boolean()?,
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(Arp {
        priority: priority.ok_or(NotPlain)?,
        may_preempt,
        preemptable,
    })
}

fn ambr(t: Slot) -> Read<Ambr> {
    let (mut ul, mut dl) = (None, None);
    t.fields(|key, v| {
        match key {
            b"ul" => ul = Some(v.u32()?),
            b"dl" => dl = Some(v.u32()?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(Ambr {
        ul: ul.ok_or(NotPlain)?,
        dl: dl.ok_or(NotPlain)?,
    })
}

fn bearer_qos(t: Slot) -> Read<BearerQos> {
    let (mut qci, mut arp_read) = (None, None);
    t.fields(|key, v| {
        match key {
            b"qci" => qci = Some(v.u32()?),
            b"arp" => arp_read = Some(arp(v.table()?)?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(BearerQos {
        qci: qci.ok_or(NotPlain)?,
        arp: arp_read.ok_or(NotPlain)?,
    })
}

fn reject(t: Slot) -> Read<Reject> {
    let mut code = None;
    let mut r = Reject {
        code: 0,
        vendor: None,
        reason: None,
    };
    t.fields(|key, v| {
        match key {
            b"code" => code = Some(v.u32()?),
            b"vendor" => r.vendor = Some(v.u32()?),
            b"reason" => r.reason = Some(v.string()?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    r.code = code.ok_or(NotPlain)?;
    Ok(r)
}

fn adc_rule(t: Slot) -> Read<AdcRule> {
    let mut r = AdcRule {
        name: None,
        base: None,
        application: None,
        monitoring_key: None,
    };
    t.fields(|key, v| {
        match key {
            b"name" => r.name = Some(v.string()?),
            b"base" => r.base = Some(v.string()?),
            b"application" => r.application = Some(v.string()?),
            b"monitoring_key" => r.monitoring_key = Some(v.string()?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(r)
}

fn validity(t: Slot) -> Read<Validity> {
    let mut v = Validity::default();
    t.fields(|key, f| {
        match key {
            b"secs" => v.secs = Some(f.u64()?),
            b"usage" => v.usage = Some(usage_validity(f)?),
            b"installed" => v.installed = Some(any_word(f)?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(v)
}

fn usage_validity(v: Slot) -> Read<UsageValidity> {
    if v.type_is(ffi::LUA_TSTRING) {
        return any_word(v).map(UsageValidity::All);
    }
    let mut by_name = litemap::LiteMap::new();
    v.fields(|key, r| {
        let name = std::str::from_utf8(key).map_err(|_| NotPlain)?;
        by_name.insert(name.to_owned(), usage_range(r)?);
        Ok(())
    })?;
    if by_name.is_empty() {
        // An empty table is a list to serde's untagged reading.
        return Err(NotPlain);
    }
    Ok(UsageValidity::Each(by_name))
}

fn usage_range(v: Slot) -> Read<UsageRange> {
    if v.type_is(ffi::LUA_TSTRING) {
        return any_word(v).map(UsageRange::Any);
    }
    let mut r = MbRange::default();
    v.fields(|key, b| {
        match key {
            b"at_least" => r.at_least = Some(b.u64()?),
            b"below" => r.below = Some(b.u64()?),
            _ => return Err(NotPlain),
        }
        Ok(())
    })?;
    Ok(UsageRange::Mb(r))
}

fn any_word(v: Slot) -> Read<AnyWord> {
    match v.string()?.as_str() {
        "any" => Ok(AnyWord::Any),
        _ => Err(NotPlain),
    }
}

/// A value on the Lua stack: valid only inside `read_decision`'s
/// protected call, while the value stays on the stack.
#[derive(Clone, Copy)]
struct Slot {
    state: *mut ffi::lua_State,
    /// Absolute stack index.
    idx: c_int,
}

impl Slot {
    fn type_is(self, t: c_int) -> bool {
        // SAFETY: see `Slot`; lua_type never fails.
        unsafe { ffi::lua_type(self.state, self.idx) == t }
    }

    fn table(self) -> Read<Slot> {
        if self.type_is(ffi::LUA_TTABLE) {
            Ok(self)
        } else {
            Err(NotPlain)
        }
    }

    /// Calls `field` with each pair of a struct table; a key that is not
    /// a string is not plain (serde would read it as a field index).
    fn fields(self, mut field: impl FnMut(&[u8], Slot) -> Read<()>) -> Read<()> {
        self.table()?;
        let state = self.state;
        // SAFETY: see `Slot`. `next` is given only the keys it returned,
        // on a table not changed meanwhile, so it cannot raise an error;
        // lua_tolstring is called on strings only, so it does not convert
        // the key in place. On an early return the protected call's end
        // drops what is left on the stack.
        unsafe {
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, self.idx) != 0 {
                let top = ffi::lua_gettop(state);
                if ffi::lua_type(state, top - 1) != ffi::LUA_TSTRING {
                    return Err(NotPlain);
                }
                let mut len = 0;
                let p = ffi::lua_tolstring(state, top - 1, &mut len);
                if p.is_null() {
                    return Err(NotPlain);
                }
                let key = std::slice::from_raw_parts(p.cast::<u8>(), len);
                field(key, Slot { state, idx: top })?;
                ffi::lua_settop(state, top - 1);
            }
        }
        Ok(())
    }

    /// The values at 1..=raw length, as serde reads a sequence (a nil in
    /// between is not plain).
    fn list<T>(self, mut item: impl FnMut(Slot) -> Read<T>) -> Read<Vec<T>> {
        self.table()?;
        let state = self.state;
        // SAFETY: see `Slot`; raw reads never raise errors or allocate.
        unsafe {
            let len = ffi::lua_rawlen(state, self.idx);
            let mut out = Vec::with_capacity(len.min(1024));
            for i in 1..=len {
                let i = ffi::lua_Integer::try_from(i).map_err(|_| NotPlain)?;
                ffi::lua_rawgeti(state, self.idx, i);
                let top = ffi::lua_gettop(state);
                out.push(item(Slot { state, idx: top })?);
                ffi::lua_settop(state, top - 1);
            }
            Ok(out)
        }
    }

    fn string(self) -> Read<String> {
        if !self.type_is(ffi::LUA_TSTRING) {
            return Err(NotPlain);
        }
        // SAFETY: see `Slot`; a string is not converted, and its bytes
        // live while it is on the stack.
        let bytes = unsafe {
            let mut len = 0;
            let p = ffi::lua_tolstring(self.state, self.idx, &mut len);
            if p.is_null() {
                return Err(NotPlain);
            }
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        };
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| NotPlain)
    }

    fn integer(self) -> Read<i64> {
        // SAFETY: see `Slot`; these never fail.
        unsafe {
            if ffi::lua_isinteger(self.state, self.idx) == 0 {
                return Err(NotPlain);
            }
            Ok(ffi::lua_tointegerx(
                self.state,
                self.idx,
                std::ptr::null_mut(),
            ))
        }
    }

    fn u32(self) -> Read<u32> {
        u32::try_from(self.integer()?).map_err(|_| NotPlain)
    }

    fn u64(self) -> Read<u64> {
        u64::try_from(self.integer()?).map_err(|_| NotPlain)
    }

    fn boolean(self) -> Read<bool> {
        if !self.type_is(ffi::LUA_TBOOLEAN) {
            return Err(NotPlain);
        }
        // SAFETY: see `Slot`; never fails.
        Ok(unsafe { ffi::lua_toboolean(self.state, self.idx) } != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::sandbox::deserialize_options;
    use mlua::{Lua, LuaSerdeExt};

    /// What serde makes of the value of `expr`, and what this reader does.
    fn both(expr: &str) -> (Result<Decision, String>, Option<Decision>) {
        let lua = Lua::new();
        let v: Value = lua
            .load(format!("return {expr}"))
            .eval()
            .expect("test expression evaluates");
        let serde = lua
            .from_value_with::<Decision>(v.clone(), deserialize_options())
            .map_err(|e| e.to_string());
        (serde, read_decision(&lua, &v))
    }

    /// Read here, and exactly as serde reads it.
    fn plain(expr: &str) -> Decision {
        match both(expr) {
            (Ok(s), Some(p)) => {
                assert_eq!(p, s, "{expr}");
                p
            }
            other => panic!("{expr}: expected both to read it, got {other:?}"),
        }
    }

    /// Left to serde (which may accept or refuse it).
    fn left_to_serde(expr: &str) -> Result<Decision, String> {
        let (serde, fast) = both(expr);
        assert!(
            fast.is_none(),
            "{expr}: read here as {fast:?}, serde: {serde:?}"
        );
        serde
    }

    const FULL: &str = r#"{
        rules = { "internet", "video-optimized" }, base_names = { "consumer" },
        definitions = { {
            name = "vip-video",
            flows = { "permit out 17 from 198.51.100.0/24 to any" },
            flow_status = 2,
            qos = { qci = 4, arp = { priority = 5, may_preempt = false, preemptable = true },
                    mbr_ul = 2000000, mbr_dl = 8000000, gbr_ul = 1000000, gbr_dl = 4000000 },
            precedence = 100, rating_group = 200, service_identifier = 2000,
            online = false, offline = true, monitoring_key = "vip",
        }, { name = "bare" } },
        apn_ambr = { ul = 5000000, dl = 4294967295 },
        default_bearer_qos = { qci = 9, arp = { priority = 10 } },
        event_triggers = { 2, 13, 17 },
        revalidation_secs = 3600,
        reject = { code = 5142, vendor = 10415, reason = "why" },
        monitoring = { "total", "vip" },
        adc = { { name = "video", application = "video-streaming", monitoring_key = "video" },
                { base = "group" } },
        spending_counters = { "monthly-data" },
        valid = { secs = 3600, usage = { monthly = { at_least = 5, below = 8000 }, daily = "any", ["*"] = {} } },
    }"#;

    #[test]
    fn plain_shapes_read_as_serde_reads_them() {
        let d = plain(FULL);
        assert_eq!(d.definitions.len(), 2);
        assert_eq!(
            d.definitions[0].qos.as_ref().map(|q| q.gbr_dl),
            Some(Some(4_000_000))
        );
        // The serde defaults: preemptable true, may_preempt false.
        let arp = d.default_bearer_qos.map(|b| b.arp);
        assert_eq!(
            arp.map(|a| (a.may_preempt, a.preemptable)),
            Some((false, true))
        );
        assert_eq!(plain("{}"), Decision::default());
        plain("{ rules = {}, definitions = {}, event_triggers = {}, adc = {} }");
        // A list's string keys are not part of the sequence serde reads.
        plain("{ rules = { 'a', x = 1 } }");
        // One table in two places (not a cycle).
        plain("(function() local a = { priority = 3 } return { default_bearer_qos = { qci = 9, arp = a }, definitions = { { name = 'r', qos = { qci = 1, arp = a } } } } end)()");
        plain("{ revalidation_secs = 9007199254740993 }");
        plain("{ valid = { usage = 'any' } }");
        plain("{ valid = { secs = 0, usage = { monthly = 'any' } } }");
        plain("{ valid = {} }");
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        // Whole floats: serde's slow path turns them into integers.
        assert!(left_to_serde("{ apn_ambr = { ul = 2e6, dl = 1 } }").is_err());
        for bad in [
            "{ rulez = {} }",
            "{ 'internet' }",
            "{ [1] = { 'x' } }",
            "{ rules = 'internet' }",
            "{ rules = { 1 } }",
            "{ rules = { 'a', nil, 'c' } }",
            "{ rules = { {} } }",
            "{ event_triggers = { '2' } }",
            "{ event_triggers = { -1 } }",
            "{ event_triggers = { 4294967296 } }",
            "{ revalidation_secs = -5 }",
            "{ apn_ambr = { ul = 1 } }",
            "{ apn_ambr = { ul = 1, dl = 2, xl = 3 } }",
            "{ apn_ambr = 5 }",
            "{ default_bearer_qos = { qci = 9 } }",
            "{ default_bearer_qos = { qci = 9, arp = { priority = 1, may_preempt = 1 } } }",
            "{ definitions = { { flows = {} } } }",
            "{ definitions = { { name = 'r', online = 'yes' } } }",
            "{ definitions = { { name = 'r', qos = { arp = { priority = 1 } } } } }",
            "{ reject = { reason = 'no code' } }",
            "{ adc = { { name = 5 } } }",
            "{ monitoring = { '\\xff' } }",
            "{ rules = print }",
            "{ valid = { ['until'] = 5 } }",
            "{ valid = { usage = 'all' } }",
            "{ valid = { usage = { monthly = { below = -1 } } } }",
            "{ valid = { usage = { monthly = { under = 1 } } } }",
            "{ valid = { usage = { monthly = 'some' } } }",
            "{ valid = { secs = '60' } }",
            "(function() local d = {} d.apn_ambr = d return d end)()",
            "(function() local l = {} l[1] = l return { definitions = l } end)()",
        ] {
            assert!(left_to_serde(bad).is_err(), "{bad}: serde accepts it");
        }
    }
}
