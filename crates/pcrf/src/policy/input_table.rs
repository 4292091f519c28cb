//! `decide`'s input table, built straight from a `PolicyInput`: a small
//! trusted Lua constructor receives the fields as call arguments and makes
//! the tables with Lua's own table constructors. Going through mlua's serde
//! serializer instead cost about 70k instructions per decision (a
//! Rust-to-Lua round trip per field), this about 52k (callgrind,
//! BENCHMARKS.md). The table is the same, field for field, as the serde
//! one (a test compares them), and fresh on every call.

use super::input::{AccumulatorInput, PolicyInput, RuleFailure};
use mlua::serde::SerializeOptions;
use mlua::{Function, Lua, LuaSerdeExt, Table, Value};

/// The constructors. Loaded with an empty environment, outside the
/// sandbox: the script cannot reach or change them.
const CONSTRUCTORS: &str = r#"
local function session(apn, rat, ip_can_type, ue_ipv4, ue_ipv6_prefix, location,
                       ms_timezone, device, pcef, installed, rule_failures)
  return {
    apn = apn, rat = rat, ip_can_type = ip_can_type, ue_ipv4 = ue_ipv4,
    ue_ipv6_prefix = ue_ipv6_prefix, location = location,
    ms_timezone = ms_timezone, device = device, pcef = pcef,
    installed = installed, rule_failures = rule_failures,
  }
end
local function input(known, imsi, msisdn, plan, services, attributes, session,
                     hour, minute, weekday, date, congestion, accumulators,
                     unknown_keys, applications, spending)
  return {
    subscriber = {
      known = known, imsi = imsi, msisdn = msisdn, plan = plan,
      services = services, attributes = attributes,
    },
    session = session,
    time = { hour = hour, minute = minute, weekday = weekday, date = date },
    network = { congestion = congestion },
    usage = { accumulators = accumulators, unknown_keys = unknown_keys },
    applications = applications,
    spending = spending,
  }
end
local function accumulator(used_mb, quota_mb, percent, exhausted)
  return { used_mb = used_mb, quota_mb = quota_mb, percent = percent, exhausted = exhausted }
end
local function rule_failure(rule, status, code)
  return { rule = rule, status = status, code = code }
end
return session, input, accumulator, rule_failure
"#;

/// The constructors of one VM.
pub(super) struct InputTable {
    session: Function,
    input: Function,
    accumulator: Function,
    rule_failure: Function,
}

impl InputTable {
    pub(super) fn load(lua: &Lua) -> mlua::Result<InputTable> {
        let (session, input, accumulator, rule_failure) = lua
            .load(CONSTRUCTORS)
            .set_name("=input")
            .set_environment(lua.create_table()?)
            .call(())?;
        Ok(InputTable {
            session,
            input,
            accumulator,
            rule_failure,
        })
    }

    /// A fresh input table for `i`; `options` are those of the serde path
    /// (used for the free-form subscriber attributes only).
    pub(super) fn build(
        &self,
        lua: &Lua,
        i: &PolicyInput,
        options: SerializeOptions,
    ) -> mlua::Result<Value> {
        let s = &i.session;
        let session: Table = self.session.call((
            s.apn.as_deref(),
            s.rat.as_deref(),
            s.ip_can_type.as_deref(),
            s.ue_ipv4.as_deref(),
            s.ue_ipv6_prefix.as_deref(),
            s.location.as_deref(),
            s.ms_timezone.as_deref(),
            s.device.as_deref(),
            s.pcef.as_str(),
            strings(lua, &s.installed)?,
            self.rule_failures(lua, &s.rule_failures)?,
        ))?;
        let sub = &i.subscriber;
        let attributes = if sub.attributes.is_empty() {
            lua.create_table()?
        } else {
            match lua.to_value_with(&sub.attributes, options)? {
                Value::Table(t) => t,
                _ => lua.create_table()?,
            }
        };
        let accumulators = lua.create_table_with_capacity(0, i.usage.accumulators.len())?;
        for (name, a) in &i.usage.accumulators {
            accumulators.raw_set(name.as_str(), self.accumulator(a)?)?;
        }
        let unknown_keys = match i.usage.unknown_keys.is_empty() {
            true => None,
            false => Some(strings(lua, &i.usage.unknown_keys)?),
        };
        let spending = match i.spending.is_empty() {
            true => None,
            false => Some(
                lua.create_table_from(i.spending.iter().map(|(k, v)| (k.as_str(), v.as_str())))?,
            ),
        };
        self.input.call((
            sub.known,
            sub.imsi.as_deref(),
            sub.msisdn.as_deref(),
            sub.plan.as_deref(),
            strings(lua, &sub.services)?,
            attributes,
            session,
            i.time.hour,
            i.time.minute,
            i.time.weekday,
            i.time.date.as_str(),
            i.network.congestion,
            accumulators,
            unknown_keys,
            strings(lua, &i.applications)?,
            spending,
        ))
    }

    fn accumulator(&self, a: &AccumulatorInput) -> mlua::Result<Table> {
        self.accumulator
            .call((a.used_mb, a.quota_mb, a.percent, a.exhausted))
    }

    fn rule_failures(&self, lua: &Lua, failures: &[RuleFailure]) -> mlua::Result<Table> {
        let t = lua.create_table_with_capacity(failures.len(), 0)?;
        for f in failures {
            let one: Table = self
                .rule_failure
                .call((f.rule.as_str(), f.status, f.code))?;
            t.raw_push(one)?;
        }
        Ok(t)
    }
}

fn strings(lua: &Lua, items: &[String]) -> mlua::Result<Table> {
    lua.create_sequence_from(items.iter().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::input::{AccumulatorInput, NetworkInput, SessionInput, TimeInput};

    fn full_input() -> PolicyInput {
        let mut p = PolicyInput::default();
        p.subscriber.known = true;
        p.subscriber.imsi = Some("001010000000001".into());
        p.subscriber.msisdn = Some("79000000001".into());
        p.subscriber.plan = Some("plus".into());
        p.subscriber.services = vec!["internet".into(), "vip".into()];
        p.subscriber.attributes.insert(
            "profile".into(),
            serde_json::json!({"blocked": false, "tier": 3, "tags": ["a", "b"], "none": null}),
        );
        p.session = SessionInput {
            apn: Some("internet".into()),
            rat: Some("EUTRAN".into()),
            ip_can_type: Some("3GPP-EPS".into()),
            ue_ipv4: Some("10.0.0.1".into()),
            ue_ipv6_prefix: Some("0040200100000000".into()),
            location: Some("8200f110000100f1100001a2b3c4".into()),
            ms_timezone: Some("4000".into()),
            device: Some("3534210112345601".into()),
            pcef: "pgw-1.bench.test".into(),
            installed: vec!["internet".into(), "vip-video".into()],
            rule_failures: vec![
                RuleFailure {
                    rule: "vip-video".into(),
                    status: 1,
                    code: Some(4),
                },
                RuleFailure {
                    rule: "other".into(),
                    status: 2,
                    code: None,
                },
            ],
        };
        p.time = TimeInput {
            hour: 23,
            minute: 59,
            weekday: 7,
            date: "2026-11-22".into(),
        };
        p.network = NetworkInput { congestion: 2 };
        p.usage.accumulators.insert(
            "monthly".into(),
            AccumulatorInput {
                used_mb: 1234,
                quota_mb: Some(10_000),
                percent: Some(12),
                exhausted: false,
            },
        );
        p.usage.accumulators.insert(
            "daily".into(),
            AccumulatorInput {
                used_mb: 7,
                quota_mb: None,
                percent: None,
                exhausted: true,
            },
        );
        p.usage.unknown_keys = vec!["mystery".into()];
        p.applications = vec!["video-streaming".into()];
        p.spending.insert("monthly-data".into(), "exhausted".into());
        p
    }

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
        let builder = InputTable::load(&lua).expect("constructors load");
        let mut cases: Vec<PolicyInput> = crate::policy::engine::sample_inputs()
            .into_iter()
            .map(|(_, i)| i)
            .collect();
        cases.push(PolicyInput::default());
        cases.push(full_input());
        for input in &cases {
            let ours = builder.build(&lua, input, options).expect("builds");
            let serde = lua.to_value_with(input, options).expect("serializes");
            assert!(same(&ours, &serde), "differs for {input:?}");
        }
        // And the comparison does see a difference.
        let mut other = full_input();
        other
            .usage
            .accumulators
            .get_mut("daily")
            .expect("daily")
            .used_mb = 8;
        let ours = builder.build(&lua, &other, options).expect("builds");
        let serde = lua
            .to_value_with(&full_input(), options)
            .expect("serializes");
        assert!(!same(&ours, &serde));
    }
}
