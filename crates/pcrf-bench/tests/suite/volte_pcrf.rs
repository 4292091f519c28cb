//! `pcrf-bench volte` against the real `pcrf serve` (the workspace's debug
//! binary, embedded store, the example policy): the population provisioned
//! through the REST API, then VoLTE calls from emulated P-GWs and P-CSCFs.
//! Every call must bind, get its voice rule pushed to its P-GW before the
//! AAA, and end with STR (the rule removed) and CCR-T. A second run whose
//! subscribers are not provisioned shows the failures counted, not hidden.

use crate::support::{free_port, pcrf_binary, repo_root};
use pcrf_bench::http_client::BaseUrl;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::provision::provision;
use pcrf_bench::scenario::Scenario;
use pcrf_bench::volte::{self, VolteLoad};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    diameter: SocketAddr,
    api: SocketAddr,
    dir: PathBuf,
}

impl Server {
    fn start() -> Server {
        let dir = std::env::temp_dir().join(format!("pcrf-bench-volte-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let diameter: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let root = repo_root();
        let mut peers = String::new();
        for host in [
            "pgw-1.bench.test",
            "pgw-2.bench.test",
            "pcscf-1.ims.test",
            "pcscf-2.ims.test",
        ] {
            peers.push_str(&format!(
                "[[peers]]\norigin_host = \"{host}\"\naddresses = [\"127.0.0.1\"]\n"
            ));
        }
        let config = dir.join("pcrf.toml");
        std::fs::write(
            &config,
            format!(
                "[node]\norigin_host = \"pcrf.pcrf.test\"\norigin_realm = \"pcrf.test\"\n\
                 [diameter]\nlisten = \"{diameter}\"\n{peers}\
                 [store]\nkind = \"sqlite\"\npath = \"{}\"\n\
                 [policy]\npath = \"{}\"\nwatch = false\n\
                 [usage]\npath = \"{}\"\n[api]\nlisten = \"{api}\"\n[log]\nlevel = \"warn\"\n",
                dir.join("data").display(),
                root.join("policies/default.lua").display(),
                root.join("config/usage.toml").display(),
            ),
        )
        .expect("config");
        let child = Command::new(pcrf_binary())
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pcrf serve");
        // Owned at once, so that a failed start still kills and reaps it.
        let server = Server {
            child,
            diameter,
            api,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect(diameter).is_ok() && TcpStream::connect(api).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("pcrf serve did not listen within 30 s");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scenario(imsi_first: &str, msisdn_first: &str) -> Scenario {
    let text = std::fs::read_to_string(repo_root().join("bench/scenarios/volte.toml"))
        .expect("volte.toml")
        .replace(
            "hold = { dist = \"exponential\", mean = \"2s\", max = \"10s\" }",
            "hold = { dist = \"fixed\", value = \"300ms\" }",
        )
        .replace("count = 100000", "count = 100")
        .replace("\"001010000000001\"", &format!("\"{imsi_first}\""))
        .replace("\"79000000001\"", &format!("\"{msisdn_first}\""));
    Scenario::parse(&text, "volte.toml").expect("scenario")
}

fn pcef(server: &Server) -> PcefOptions {
    PcefOptions {
        target: server.diameter,
        peers: 2,
        request_timeout: Duration::from_secs(5),
        watchdog: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(10),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volte_calls_against_pcrf_serve() {
    let server = Server::start();
    let s = scenario("001010000000001", "79000000001");
    let base = BaseUrl::parse(&format!("http://{}", server.api)).expect("url");
    let p = provision(&base, &s.population, &s.provision, 2)
        .await
        .expect("provision");
    assert_eq!(p.failed, 0);

    let load = VolteLoad {
        calls_per_second: 10.0,
        duration: Duration::from_secs(2),
        seed: 3,
    };
    let r = volte::run(Arc::new(s), &pcef(&server), load)
        .await
        .expect("volte run");
    let n = r.calls.started;
    assert!(n >= 10, "{n} calls");
    assert_eq!(r.calls.completed, n, "{}", r.summary());
    for name in ["CCR-I", "AAR", "STR", "CCR-T", "CALL-SETUP"] {
        let c = r.command(name).expect(name);
        assert_eq!((c.sent, c.succeeded), (n, n), "{name}: {}", r.summary());
    }
    // The voice rule went to the P-GW before each AAA and left on each STR.
    assert!(r.pcef_rar.received >= 2 * n, "{}", r.summary());
    assert_eq!(r.pcef_rar.answered, r.pcef_rar.received);
    assert_eq!(r.af.asr_received, 0, "calls ended by STR, not by the PCRF");
    assert!(r.peer_events.is_empty(), "{:?}", r.peer_events);

    // Subscribers the PCRF does not know: the Gx attach is refused, so the
    // call never reaches Rx, and the report says so.
    let unknown = scenario("001019990000001", "79990000001");
    let r = volte::run(Arc::new(unknown), &pcef(&server), load)
        .await
        .expect("volte run");
    let n = r.calls.started;
    assert_eq!(r.calls.failed, n, "{}", r.summary());
    let ccr_i = r.command("CCR-I").expect("CCR-I");
    assert_eq!((ccr_i.sent, ccr_i.succeeded), (n, 0), "{}", r.summary());
    assert_eq!(r.command("AAR").map(|c| c.sent), Some(0));
}
