//! The operator console in a real browser: Debian's headless Chromium,
//! driven through chromedriver (WebDriver) by fantoccini, against a live
//! `pcrf serve` with an API token. It loads every page, types the token,
//! provisions a subscriber whose attribute holds markup, opens a session
//! with `pcrf client gx` (reporting usage) and a 5G PDU session over N7,
//! finds both on the subscriber page, tops up and sees the usage bar move, runs the policy's
//! test cases and a dry run, breaks the policy in the editor and sees the
//! line number, deploys a change and sees it in the history, and checks
//! the pages' Content-Security-Policy. Against an API without a token, the
//! console's changes still pass the API's browser checks, and a page of
//! another origin posting as a form would is refused.
//!
//! Screenshots go to a temporary directory, or to the directory named by
//! `PCRF_CONSOLE_SCREENSHOTS` (the documentation's are made with
//! `PCRF_CONSOLE_SCREENSHOTS=docs/console`, relative to the repository).

use crate::support;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::{repo_root, scratch_dir, usage_section, Pcrf, USAGE_FILE};

const TOKEN: &str = "console-test-token-7f3a9c1e";
const IMSI: &str = "001010000000042";
/// Shown as text, never run: the page would set `window.pwned`.
const HOSTILE: &str = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">";

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (scripts/install-test-deps.sh installs chromium-driver)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                // --no-sandbox: CI runs the tests as root, where Chromium's
                // sandbox refuses to start.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1400",
                         "--hide-scrollbars"],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("WebDriver session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `pcrf client gx` process holding a session, killed on drop.
struct GxClient(Child);

impl Drop for GxClient {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn screenshots_dir() -> PathBuf {
    match std::env::var_os("PCRF_CONSOLE_SCREENSHOTS") {
        Some(d) => {
            let d = PathBuf::from(d);
            let d = if d.is_absolute() {
                d
            } else {
                repo_root().join(d)
            };
            std::fs::create_dir_all(&d).expect("screenshot dir");
            d
        }
        None => scratch_dir("console-screenshots"),
    }
}

async fn api(p: &Pcrf, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("http://{}{path}", p.api))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b.to_string());
    }
    let r = req.send().await.expect("API call");
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn provision(p: &Pcrf, imsi: &str) {
    let (st, body) = api(
        p,
        reqwest::Method::PUT,
        &format!("/v1/subscribers/{imsi}"),
        Some(json!({"plan": "basic"})),
    )
    .await;
    assert!(st == 200 || st == 201, "{body}");
}

/// Evaluates `expr` in the page until it is truthy; returns its value.
async fn wait_for(c: &Client, expr: &str, what: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = c
            .execute(&format!("return ({expr});"), vec![])
            .await
            .unwrap_or(Value::Null);
        let truthy = match &v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            _ => true,
        };
        if truthy {
            return v;
        }
        if Instant::now() > deadline {
            let body = c
                .execute("return document.body.innerText;", vec![])
                .await
                .unwrap_or(Value::Null);
            panic!("timed out waiting for {what} ({expr}); page text:\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn text_of(c: &Client, selector: &str) -> String {
    c.find(Locator::Css(selector))
        .await
        .unwrap_or_else(|e| panic!("{selector}: {e}"))
        .text()
        .await
        .expect("text")
}

async fn click(c: &Client, selector: &str) {
    c.find(Locator::Css(selector))
        .await
        .unwrap_or_else(|e| panic!("{selector}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {selector}: {e}"));
}

/// Confirms the page's confirmation dialog.
async fn confirm(c: &Client) {
    wait_for(
        c,
        "document.getElementById('confirm').open",
        "the confirmation dialog",
    )
    .await;
    click(c, "#confirm-ok").await;
}

async fn screenshot(c: &Client, dir: &std::path::Path, name: &str) {
    c.execute("window.scrollTo(0, 0);", vec![])
        .await
        .expect("scroll");
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(name), png).expect("write screenshot");
}

/// The used fraction of the subscriber's monthly accumulator, as its bar shows it.
async fn monthly_fraction(c: &Client) -> f64 {
    let v = wait_for(
        c,
        "document.querySelector('tr[data-accumulator=\"monthly\"] .meter')?.dataset.fraction",
        "the monthly usage bar",
    )
    .await;
    v.as_str().and_then(|s| s.parse().ok()).expect("fraction")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_headless_chromium() {
    let dir = screenshots_dir();
    let sbi = support::free_port();
    let decisions = scratch_dir("console-decisions").join("decisions.jsonl");
    let p = Pcrf::start_with_api(
        &format!("token = \"{TOKEN}\""),
        &format!(
            "{}\n[[peers]]\norigin_host = \"pgw2.test.local\"\naddresses = [\"127.0.0.1\"]\n\
             [sbi]\nlisten = \"127.0.0.1:{sbi}\"\n\
             [decision_log]\nenabled = true\nfile = \"{}\"\n",
            usage_section(USAGE_FILE).0,
            decisions.display()
        ),
    );
    std::fs::copy(
        repo_root().join("policies/default.cases.toml"),
        p.dir.join("policy.cases.toml"),
    )
    .expect("copy cases");

    // Every console response carries the strict policy; no inline script.
    let r = reqwest::get(format!("http://{}/", p.api))
        .await
        .expect("GET /");
    assert_eq!(r.status(), 200, "the shell is public: it holds no data");
    let csp = r
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe"), "{csp}");
    let html = r.text().await.expect("html");
    assert!(!html.contains("<script>"), "no inline script in the shell");
    let js = reqwest::get(format!("http://{}/console/assets/common.js", p.api))
        .await
        .expect("asset");
    assert!(js.headers().contains_key("content-security-policy"));
    // The data stays behind the token.
    let r = reqwest::get(format!("http://{}/v1/stats", p.api))
        .await
        .expect("stats");
    assert_eq!(r.status(), 401);

    let (st, body) = api(
        &p,
        reqwest::Method::PUT,
        &format!("/v1/subscribers/{IMSI}"),
        Some(json!({
            "msisdn": "491700000042", "plan": "basic", "services": ["vip"],
            "attributes": { "note": HOSTILE, "segment": "gold" },
        })),
    )
    .await;
    assert_eq!(st, 201, "{body}");

    // A session held open by the CLI's PCEF, reporting 2 GB used.
    let _gx = GxClient(
        Command::new(env!("CARGO_BIN_EXE_pcrf"))
            .args(["client", "gx", "--server", &p.diameter.to_string()])
            .args([
                "--origin-host",
                "pgw.test.local",
                "--origin-realm",
                "test.local",
            ])
            .args([
                "--imsi",
                IMSI,
                "--updates",
                "1",
                "--report",
                "total=2000000000",
            ])
            .args(["--hold", "300"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pcrf client gx"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, u) = api(
            &p,
            reqwest::Method::GET,
            &format!("/v1/subscribers/{IMSI}/usage"),
            None,
        )
        .await;
        if u["accumulators"]["monthly"]["used"].as_u64() == Some(2_000_000_000) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "usage never reported: {u}\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Traffic for the dashboard's charts: another session, a CCR-U a second.
    provision(&p, "001010000000043").await;
    let _busy = GxClient(
        Command::new(env!("CARGO_BIN_EXE_pcrf"))
            .args(["client", "gx", "--server", &p.diameter.to_string()])
            .args([
                "--origin-host",
                "pgw2.test.local",
                "--origin-realm",
                "test.local",
            ])
            .args(["--imsi", "001010000000043", "--ue-ip", "10.45.0.3"])
            .args([
                "--updates",
                "30",
                "--report",
                "total=50000000",
                "--hold",
                "300",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pcrf client gx"),
    );

    let driver = Driver::start();
    let c = driver.browser().await;
    let base = format!("http://{}", p.api);

    // Dashboard: without the token the page says so; with it, it goes live.
    c.goto(&format!("{base}/")).await.expect("dashboard");
    wait_for(
        &c,
        "document.getElementById('status').textContent.includes('token')",
        "the token request",
    )
    .await;
    c.find(Locator::Id("token"))
        .await
        .expect("token input")
        .send_keys(TOKEN)
        .await
        .expect("type token");
    click(&c, "#token-form button").await;
    wait_for(
        &c,
        "document.querySelector('#commands tr[data-command=\"CCR-I\"]')",
        "the CCR-I row",
    )
    .await;
    wait_for(
        &c,
        "document.querySelector('#peers tr[data-peer=\"pgw.test.local\"] .state-open')",
        "the open peer",
    )
    .await;
    // A few polls, so the charts have lines (the second session sends a
    // CCR-U a second).
    let first = text_of(&c, "#updated b").await;
    wait_for(
        &c,
        &format!("document.querySelector('#updated b').textContent !== {first:?}"),
        "a refresh within 2 s",
    )
    .await;
    let paths = wait_for(
        &c,
        "(() => { const n = document.querySelectorAll('svg.chart path.series').length; return n >= 3 ? n : 0; })()",
        "three chart lines",
    )
    .await;
    assert!(paths.as_u64().unwrap_or(0) >= 3, "chart lines: {paths}");
    // The policy version serving, with the Gx requests it decided.
    let version = wait_for(
        &c,
        "(() => { const r = document.querySelector('#versions tr[data-version=\"1\"]'); return r && Number(r.cells[2].textContent.replace(/[^0-9]/g, '')) > 0 && r.cells[7].textContent !== '—' ? Array.from(r.cells).map(c => c.textContent) : null; })()",
        "version 1's row with decisions and an Apdex",
    )
    .await;
    assert_eq!(version[1], "serving", "{version}");
    screenshot(&c, &dir, "dashboard.png").await;

    // A 5G PDU session of the same subscriber, from an SMF over N7 (its
    // notifications go to an independent HTTP/2 server).
    let callback = support::Callback::start();
    let smf = support::Smf::in_runtime(sbi);
    let mut create = support::create_body(&callback, "/nsmf-callback/v1/sm-policy-notify/console");
    create["supi"] = json!(format!("imsi-{IMSI}"));
    create["gpsi"] = json!("msisdn-491700000042");
    let (st, _, created) = smf.send(true, "", Some(&create)).await;
    assert_eq!(st, 201, "{created}");

    // Subscriber: search, the session, the hostile attribute as text.
    c.goto(&format!("{base}/console/subscribers"))
        .await
        .expect("subscribers");
    c.find(Locator::Id("q"))
        .await
        .expect("search box")
        .send_keys("0010100000000")
        .await
        .expect("type");
    click(&c, "#search-form button").await;
    wait_for(
        &c,
        &format!("document.querySelector('#result-table tr[data-imsi=\"{IMSI}\"]')"),
        "the search result",
    )
    .await;
    click(&c, &format!("#result-table tr[data-imsi=\"{IMSI}\"] a")).await;
    wait_for(
        &c,
        "document.querySelector('article.session')",
        "the open session",
    )
    .await;
    let note = c
        .execute(
            "return [...document.querySelectorAll('#attributes td')].map(td => td.textContent);",
            vec![],
        )
        .await
        .expect("attributes");
    assert!(
        note.as_array()
            .is_some_and(|cells| cells.iter().any(|t| t == HOSTILE)),
        "the attribute shows as text: {note}"
    );
    let pwned = c
        .execute(
            "return [window.pwned === undefined, document.querySelectorAll('main script, main img').length];",
            vec![],
        )
        .await
        .expect("pwned");
    assert_eq!(
        pwned,
        json!([true, 0]),
        "markup from provisioning never runs"
    );
    let decision = text_of(&c, "article.session[data-interface=gx] .decision").await;
    assert!(decision.contains("internet"), "{decision}");
    assert!(decision.contains("vip-video"), "{decision}");
    // The PDU session beside it, with the SMF's context and its decision.
    wait_for(
        &c,
        "document.querySelector('article.session[data-interface=n7]')",
        "the PDU session",
    )
    .await;
    let fields = text_of(&c, "article.session[data-interface=n7] table.fields").await;
    for want in [
        "N7 (5G PDU session)",
        "/nsmf-callback/v1/sm-policy-notify/console",
        &format!("imsi-{IMSI}"),
        "SST 1",
        "/ NR",
        "10.45.0.2",
    ] {
        assert!(fields.contains(want), "{want} in {fields}");
    }
    let decision = text_of(&c, "article.session[data-interface=n7] .decision").await;
    assert!(decision.contains("vip-video"), "{decision}");
    // The last decisions, read back from the decision log's file: the
    // PDU session's Create and the Gx CCR-I, each by version 1.
    let rows = wait_for(
        &c,
        "(() => { const r = Array.from(document.querySelectorAll('#decisions tbody tr')).map(r => [r.cells[1].textContent, r.cells[3].textContent]); return r.length ? r : null; })()",
        "the last decisions",
    )
    .await;
    let rows: Vec<(String, String)> = serde_json::from_value(rows).unwrap_or_default();
    assert!(
        rows.contains(&("create".to_string(), "1".to_string()))
            && rows.iter().any(|(t, v)| t.starts_with("ccr-") && v == "1"),
        "{rows:?}"
    );
    screenshot(&c, &dir, "subscriber-n7.png").await;
    // Re-authorize: confirmed, then the RAR's outcome is shown.
    click(&c, "article.session[data-interface=gx] .actions button").await;
    confirm(&c).await;
    let outcome = wait_for(
        &c,
        "document.getElementById('session-state')?.textContent",
        "the re-authorization's outcome",
    )
    .await;
    assert!(
        outcome.as_str().is_some_and(|s| s.contains("rar_sent")),
        "{outcome}"
    );
    let before = monthly_fraction(&c).await;
    assert!((before - 0.2).abs() < 1e-6, "2 GB of 10 GB: {before}");

    // Top up 10 GB: the allowance doubles, the bar halves.
    let acc = c
        .execute(
            "return document.getElementById('topup-accumulator').value;",
            vec![],
        )
        .await
        .expect("accumulator");
    assert_eq!(acc, "monthly");
    c.execute(
        "document.querySelector('#topup-form input[name=mb]').value = '10000';",
        vec![],
    )
    .await
    .expect("amount");
    click(&c, "#topup").await;
    confirm(&c).await;
    let after = wait_for(
        &c,
        &format!(
            "(f => f < {before} ? f : null)(Number(document.querySelector('tr[data-accumulator=\"monthly\"] .meter')?.dataset.fraction))"
        ),
        "the bar to move after the top-up",
    )
    .await;
    assert!(
        (after.as_f64().unwrap_or(0.0) - 0.1).abs() < 1e-6,
        "{after}"
    );
    screenshot(&c, &dir, "subscriber.png").await;

    // Edit the profile: another plan, confirmed, shown after saving.
    c.execute(
        "document.querySelector('#profile-form').closest('details').open = true;\
         document.querySelector('#profile-form input[name=plan]').value = 'plus';",
        vec![],
    )
    .await
    .expect("edit");
    click(&c, "#profile-form button[type=submit]").await;
    confirm(&c).await;
    wait_for(
        &c,
        "document.getElementById('profile')?.textContent.includes('plus')",
        "the saved plan",
    )
    .await;
    let (_, profile) = api(
        &p,
        reqwest::Method::GET,
        &format!("/v1/subscribers/{IMSI}"),
        None,
    )
    .await;
    assert_eq!(profile["plan"], "plus");
    assert_eq!(
        profile["attributes"]["note"], HOSTILE,
        "attributes kept as they were"
    );

    // The same page on a phone's width.
    c.set_window_size(390, 844).await.expect("phone size");
    c.refresh().await.expect("reload");
    wait_for(
        &c,
        "document.querySelector('article.session')",
        "the session on a phone",
    )
    .await;
    let overflow = c
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1;",
            vec![],
        )
        .await
        .expect("width");
    assert_eq!(overflow, json!(true), "no sideways scrolling on a phone");
    screenshot(&c, &dir, "subscriber-phone.png").await;
    c.set_window_size(1280, 1400).await.expect("laptop size");

    // Policy: the test cases and a dry run on the running script.
    c.goto(&format!("{base}/console/policy"))
        .await
        .expect("policy");
    wait_for(
        &c,
        "document.getElementById('editor').value.includes('function decide')",
        "the running script in the editor",
    )
    .await;
    click(&c, "#run-tests").await;
    let summary = wait_for(
        &c,
        "document.getElementById('tests-summary')?.textContent",
        "the test results",
    )
    .await;
    assert!(
        summary.as_str().is_some_and(|s| s.contains(" 0 failed")),
        "{summary}"
    );
    c.find(Locator::Id("dry-imsi"))
        .await
        .expect("dry run box")
        .send_keys(IMSI)
        .await
        .expect("type");
    click(&c, "#dry-form button").await;
    let verdict = wait_for(
        &c,
        "document.getElementById('dry-verdict')?.textContent",
        "the dry run",
    )
    .await;
    assert_eq!(verdict, "Same decision.");
    screenshot(&c, &dir, "policy.png").await;

    // Break it: a statement that cannot parse, as line 40.
    let source = c
        .execute("return document.getElementById('editor').value;", vec![])
        .await
        .expect("source");
    let source = source.as_str().expect("text").to_string();
    let mut lines: Vec<&str> = source.lines().collect();
    lines.insert(39, "local broken = = 1");
    let broken = lines.join("\n");
    c.execute(
        "document.getElementById('editor').value = arguments[0];",
        vec![json!(broken)],
    )
    .await
    .expect("set draft");
    click(&c, "#check").await;
    let line = wait_for(
        &c,
        "document.getElementById('error-line')?.dataset.line",
        "the error's line",
    )
    .await;
    assert_eq!(line, "40");
    let text = text_of(&c, "#check-result").await;
    assert!(text.contains("line 40:"), "{text}");
    assert!(text.contains("40 | local broken = = 1"), "{text}");
    screenshot(&c, &dir, "policy-error.png").await;

    // Deploy a harmless change: diff, confirmation, new version, history.
    let changed = format!("{source}\n-- deployed from the console test\n");
    c.execute(
        "document.getElementById('editor').value = arguments[0];",
        vec![json!(changed)],
    )
    .await
    .expect("set draft");
    let old_version = text_of(&c, "#running-version").await;
    click(&c, "#deploy").await;
    wait_for(
        &c,
        "document.getElementById('confirm').open",
        "the deploy dialog",
    )
    .await;
    let diff = text_of(&c, "#confirm-detail").await;
    assert!(
        diff.contains("+ -- deployed from the console test"),
        "{diff}"
    );
    click(&c, "#confirm-ok").await;
    wait_for(&c, "document.getElementById('deployed')", "the deployment").await;
    let new_version = wait_for(
        &c,
        &format!(
            "(v => v !== {old_version:?} ? v : null)(document.getElementById('running-version').textContent)"
        ),
        "the new running version",
    )
    .await;
    let history = text_of(&c, "#history-table").await;
    assert!(
        history.contains(new_version.as_str().unwrap_or("?")) && history.contains("token"),
        "{history}"
    );
    let on_disk = std::fs::read_to_string(&p.policy).expect("policy file");
    assert!(on_disk.ends_with("-- deployed from the console test\n"));

    // Roll back to version 1 from the history: its diff, confirmation,
    // the old script serving again as version 3.
    click(&c, "#history-table button.rollback").await;
    wait_for(
        &c,
        "document.getElementById('confirm').open",
        "the rollback dialog",
    )
    .await;
    let diff = text_of(&c, "#confirm-detail").await;
    assert!(
        diff.contains("--- version 2") && diff.contains("-- deployed from the console test"),
        "{diff}"
    );
    click(&c, "#confirm-ok").await;
    wait_for(
        &c,
        &format!(
            "(v => v === {old_version:?} ? v : null)(document.getElementById('running-version').textContent)"
        ),
        "the old version serving again",
    )
    .await;
    let history = text_of(&c, "#history-table").await;
    assert!(history.contains("rollback to version 1"), "{history}");
    assert_eq!(
        std::fs::read_to_string(&p.policy).expect("policy file"),
        source
    );

    // Peers.
    c.goto(&format!("{base}/console/peers"))
        .await
        .expect("peers");
    wait_for(
        &c,
        "document.querySelector('#peers tr[data-peer=\"pgw.test.local\"] .state-open')",
        "the peer row",
    )
    .await;
    let header = text_of(&c, "#peers thead").await;
    assert!(
        header.contains("last error") && header.contains("DOIC"),
        "{header}"
    );
    // The emulated PCEF's requests carry no OC-Supported-Features.
    let doic = text_of(&c, "#peers tr[data-peer=\"pgw.test.local\"] .doic").await;
    assert_eq!(doic, "no");
    screenshot(&c, &dir, "peers.png").await;

    c.close().await.expect("close browser");
}

/// The API routes the console added, without a browser: search paging and
/// its exact look-ups, and a broken deployment refused with its line while
/// the file and the running script stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_routes_search_and_refuse_broken_deployments() {
    use reqwest::Method;
    let p = Pcrf::start_with_api(&format!("token = \"{TOKEN}\""), "");
    let batch: Vec<Value> = (0..45)
        .map(|i| json!({"imsi": format!("0010100000001{i:02}"), "msisdn": format!("4917000001{i:02}")}))
        .collect();
    let (st, body) = api(
        &p,
        Method::POST,
        "/v1/subscribers/batch",
        Some(json!(batch)),
    )
    .await;
    assert_eq!(st, 200, "{body}");

    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for expected in [20, 20, 5] {
        let path = match &after {
            Some(a) => format!("/v1/subscribers?q=00101&limit=20&after={a}"),
            None => "/v1/subscribers?q=00101&limit=20".to_string(),
        };
        let (st, page) = api(&p, Method::GET, &path, None).await;
        assert_eq!(st, 200, "{page}");
        assert_eq!(page["matched_by"], "imsi_prefix");
        let imsis: Vec<String> = page["subscribers"]
            .as_array()
            .expect("list")
            .iter()
            .map(|s| s["imsi"].as_str().expect("imsi").to_string())
            .collect();
        assert_eq!(imsis.len(), expected, "{page}");
        seen.extend(imsis);
        after = page["next"].as_str().map(str::to_string);
    }
    assert!(after.is_none(), "the last page has no next");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "pages in IMSI order, none twice");
    assert_eq!(seen.len(), 45);

    let (_, by_msisdn) = api(&p, Method::GET, "/v1/subscribers?q=491700000107", None).await;
    assert_eq!(by_msisdn["matched_by"], "msisdn");
    assert_eq!(by_msisdn["subscribers"][0]["imsi"], "001010000000107");
    let (_, by_prefix) = api(&p, Method::GET, "/v1/subscribers?q=4917000001", None).await;
    assert_eq!(by_prefix["subscribers"].as_array().map(Vec::len), Some(20));
    assert_eq!(by_prefix["matched_by"], "msisdn_prefix");
    let next = by_prefix["next"].as_str().expect("a second page");
    let (_, page2) = api(
        &p,
        Method::GET,
        &format!("/v1/subscribers?q=4917000001&after={next}"),
        None,
    )
    .await;
    assert_eq!(
        page2["subscribers"].as_array().map(Vec::len),
        Some(20),
        "{page2}"
    );
    assert_ne!(
        page2["subscribers"][0]["imsi"],
        by_prefix["subscribers"][0]["imsi"]
    );
    let (st, _) = api(&p, Method::GET, "/v1/subscribers?limit=0", None).await;
    assert_eq!(st, 400);

    let before = std::fs::read_to_string(&p.policy).expect("policy");
    let (_, running) = api(&p, Method::GET, "/v1/policy", None).await;
    assert_eq!(running["source"], before.as_str());
    assert_eq!(running["id"], 1, "{running}");
    let (_, versions) = api(&p, Method::GET, "/v1/policy/versions", None).await;
    assert_eq!(versions["versions"][0]["by"], "file", "{versions}");
    let broken = format!("{before}\nlocal x = = 1\n");
    let (st, err) = api(
        &p,
        Method::PUT,
        "/v1/policy",
        Some(json!({"source": broken})),
    )
    .await;
    assert_eq!(st, 422, "{err}");
    assert_eq!(
        err["line"].as_u64(),
        Some(before.lines().count() as u64 + 2),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&p.policy).expect("policy"), before);
    let (_, again) = api(&p, Method::GET, "/v1/policy", None).await;
    assert_eq!(again["version"], running["version"]);
    assert_eq!(again["id"], running["id"]);
    let (_, versions) = api(&p, Method::GET, "/v1/policy/versions", None).await;
    assert_eq!(versions["versions"].as_array().map(Vec::len), Some(1));

    let (st, r) = api(
        &p,
        Method::POST,
        "/v1/policy/dry-run",
        Some(json!({"source": before, "subscriber": "001010000000999"})),
    )
    .await;
    assert_eq!(st, 404, "no such subscriber: {r}");
}

/// Without a token, the console's own changes (JSON, same origin; a
/// body-less one too) are served, while a page of another origin that
/// makes the browser POST as a form would is refused before it acts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_console_works_and_other_origins_are_refused() {
    let p = Pcrf::start_with_api("", "");
    let driver = Driver::start();
    let c = driver.browser().await;
    let port = p.api.port();
    c.goto(&format!("http://127.0.0.1:{port}/"))
        .await
        .expect("dashboard");
    let run = |script: &'static str| {
        let c = c.clone();
        async move {
            c.execute_async(
                &format!(
                    "const done = arguments[arguments.length - 1];\n\
                     ({script}).then(r => done(r), e => done('failed: ' + e.message));"
                ),
                vec![],
            )
            .await
            .expect("script")
        }
    };
    let reloaded = run("api('POST', '/v1/policy/reload').then(r => r.version)").await;
    assert!(
        reloaded.as_str().is_some_and(|v| v.len() == 16),
        "the console's body-less change: {reloaded}\n{}",
        p.log()
    );
    let put =
        run("api('PUT', '/v1/subscribers/001010000000044', {plan: 'basic'}).then(r => r.imsi)")
            .await;
    assert_eq!(put, json!("001010000000044"), "{}", p.log());

    // A page of another origin (a plain page on another port) posting
    // without asking, as a form would. It cannot read the answer; the
    // server's log says what became of it.
    let other = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let other_port = other.local_addr().expect("addr").port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = other.accept().await {
            let mut head = [0u8; 4096];
            let _ = s.read(&mut head).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 13\r\nConnection: close\r\n\r\n<p>other</p>\n")
                .await;
        }
    });
    c.goto(&format!("http://127.0.0.1:{other_port}/"))
        .await
        .expect("the other origin");
    let script = format!(
        "fetch('http://127.0.0.1:{port}/v1/subscribers/001010000000044/usage/reset', \
         {{method: 'POST', mode: 'no-cors', body: 'x'}}).then(() => 'sent')"
    );
    let sent = c
        .execute_async(
            &format!(
                "const done = arguments[arguments.length - 1];\n\
                 ({script}).then(r => done(r), e => done('failed: ' + e.message));"
            ),
            vec![],
        )
        .await
        .expect("script");
    assert_eq!(sent, json!("sent"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let log = p.log();
        if let Some(l) = log
            .lines()
            .find(|l| l.contains("usage/reset") && l.contains("status="))
        {
            break l.to_string();
        }
        assert!(Instant::now() < deadline, "request never logged:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(line.contains("status=403"), "{line}");
}
