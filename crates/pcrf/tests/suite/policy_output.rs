//! What a policy returns is checked before it reaches the wire, against
//! the real `pcrf` binary over TCP: a decision with a field out of range
//! (an instant past the clock's range) falls back instead of panicking the
//! encoder and leaving the CCR unanswered, and a decision whose CCA is
//! larger than the configured maximum (or than the 24-bit Diameter length)
//! is answered 5012 on a connection that stays usable.

use crate::support;

use diameter::dict::avp;
use support::*;

const FAR: &str = "001010000000071";
const WIDE: &str = "001010000000072";
const HUGE: &str = "001010000000073";
const PLAIN: &str = "001010000000074";

/// Decides normally except for the test's IMSIs, so the built-in sample
/// inputs pass at reload and only those sessions get the extreme results.
const POLICY: &str = r#"
function decide(input)
  local imsi = input.subscriber.imsi
  if imsi == '001010000000071' then
    return { rules = { 'internet' }, revalidation_secs = math.maxinteger }
  end
  if imsi == '001010000000072' or imsi == '001010000000073' then
    -- 4000-byte flows, 256 per rule: about 1 MB of CCA per rule.
    local flow = 'permit out ip from any to assigned ' .. string.rep('x', 3960)
    local flows = {}
    for i = 1, 256 do flows[i] = flow end
    local n = imsi == '001010000000072' and 1 or 20
    local defs = {}
    for i = 1, n do defs[i] = { name = 'wide-' .. i, flows = flows } end
    return { rules = { 'internet' }, definitions = defs }
  end
  return { rules = { 'internet' }, revalidation_secs = 3600 }
end
"#;

/// The server with the test policy; `max_message_bytes` set in its
/// `[diameter]` section when given (the file is rewritten and the server
/// restarted on it: that setting needs a restart).
fn start(max_message_bytes: Option<u32>) -> Pcrf {
    let mut p = Pcrf::start("[policy.fallback]\nrules = [\"fallback-internet\"]\n");
    if let Some(max) = max_message_bytes {
        let text = std::fs::read_to_string(&p.config).expect("config");
        let text = text.replacen(
            "[diameter]\n",
            &format!("[diameter]\nmax_message_bytes = {max}\n"),
            1,
        );
        std::fs::write(&p.config, text).expect("write config");
        p.restart();
    }
    std::fs::write(&p.policy, POLICY).expect("write policy");
    let (st, out) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{out}");
    for imsi in [FAR, WIDE, HUGE, PLAIN] {
        p.provision(imsi, r#"{"plan":"basic"}"#);
    }
    p
}

fn metric(p: &Pcrf, name: &str) -> u64 {
    let text = p.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

fn error_message(m: &diameter::codec::Message) -> String {
    m.find(avp::ERROR_MESSAGE)
        .expect("avps")
        .and_then(|a| a.as_str().ok().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revalidation_out_of_range_answers_the_fallback() {
    let p = start(None);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let before = metric(&p, "pcrf_policy_fallbacks_total");

    let sid = "pgw.test.local;71;1";
    let cca = pcef.ccr_i(sid, FAR).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(
        rule_changes(&cca).0,
        vec!["fallback-internet".to_string()],
        "the fallback decision applies"
    );
    assert_eq!(metric(&p, "pcrf_policy_fallbacks_total"), before + 1);
    let log = p.log();
    assert!(
        log.contains("revalidation_secs = 9223372036854775807"),
        "the log names the field and the value:\n{log}"
    );
    // A retransmission is answered as well (the stored answer).
    let again = pcef
        .ccr_again(
            sid,
            diameter::dict::enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            |b| initial_avps(b, FAR),
        )
        .await;
    assert_eq!(result_of(&again), 2001);
    // The server still serves everyone else.
    let cca = pcef.ccr_i("pgw.test.local;74;1", PLAIN).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(rule_changes(&cca).0, vec!["internet".to_string()]);

    // A script that returns it for every input is refused at reload.
    std::fs::write(
        &p.policy,
        "function decide(input) return { revalidation_secs = math.maxinteger } end\n",
    )
    .expect("write");
    let (st, out) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 422, "{out}");
    assert!(out.to_string().contains("revalidation_secs"), "{out}");
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_maximum_is_5012_and_the_connection_stays() {
    // One rule of about 1 MB against a 256 KiB maximum; twenty rules
    // (about 20 MB) are over the 24-bit length as well.
    let p = start(Some(262_144));
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let before = metric(&p, "pcrf_answers_too_large_total");

    for (n, imsi) in [(1, WIDE), (2, HUGE)] {
        let cca = pcef.ccr_i(&format!("pgw.test.local;7{n};1"), imsi).await;
        assert_eq!(result_of(&cca), 5012, "{imsi}");
        let why = error_message(&cca);
        assert!(why.contains("262144"), "{why}");
        cca.validate().expect("the 5012 answer is well formed");
        // The PCEF holds no session after a 5012 CCA-I: neither does the PCRF.
        let (status, _) = p.http("GET", &format!("/v1/sessions/pgw.test.local;7{n};1"), None);
        assert_eq!(status, 404, "{imsi}: the refused session was not kept");
        // The same connection answers the next request.
        let ok = pcef.ccr_i(&format!("pgw.test.local;74;{n}"), PLAIN).await;
        assert_eq!(result_of(&ok), 2001);
    }
    assert_eq!(metric(&p, "pcrf_answers_too_large_total"), before + 2);
    assert!(p.log().contains("max_message_bytes"));
    pcef.close().await;
}
