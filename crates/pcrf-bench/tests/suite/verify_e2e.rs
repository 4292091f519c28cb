//! The chaos suite's checker against the real server, small and quick: the
//! seed scenario with usage at 150 requests/s against `pcrf serve`
//! (the workspace's debug binary), `kill -9` of the server in the middle
//! and a restart on the same data, the generator retransmitting whatever
//! was lost; then `verify` must pass, and must fail once the answer log
//! claims an acknowledgement the server never gave.

use crate::support::{free_port, pcrf_binary, repo_root};
use pcrf_bench::delivery::{AnswerLog, AnswerRecord, Delivery, Retransmit};
use pcrf_bench::http_client::BaseUrl;
use pcrf_bench::open_loop::OpenLoop;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::provision::provision;
use pcrf_bench::runner::{measure_with, CpuTargets, Load, RunExtras, RunSetup};
use pcrf_bench::scenario::Scenario;
use pcrf_bench::verify::{load_log, verify, Api};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Server {
    child: Option<Child>,
    config: PathBuf,
    diameter: SocketAddr,
    api: SocketAddr,
}

impl Server {
    fn new(dir: &Path) -> Server {
        let diameter: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let root = repo_root();
        let mut peers = String::new();
        for i in 1..=2 {
            peers.push_str(&format!(
                "[[peers]]\norigin_host = \"pgw-{i}.bench.test\"\naddresses = [\"127.0.0.1\"]\n"
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
        let mut s = Server {
            child: None,
            config,
            diameter,
            api,
        };
        s.start();
        s
    }

    fn start(&mut self) {
        let child = Command::new(pcrf_binary())
            .args(["serve", "--config"])
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pcrf serve");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect(self.diameter).is_ok() && TcpStream::connect(self.api).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("pcrf serve did not listen within 30 s");
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("SIGKILL");
            c.wait().expect("reap");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_after_kill_9_and_catches_a_false_acknowledgement() {
    let dir = std::env::temp_dir().join(format!("pcrf-bench-verify-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut server = Server::new(&dir);
    let mut scenario =
        Scenario::load(&repo_root().join("bench/scenarios/seed-fast.toml")).expect("scenario");
    scenario.population = scenario.population.with_count(200).expect("population");
    let base = BaseUrl::parse(&format!("http://{}", server.api)).expect("url");
    let r = provision(&base, &scenario.population, &scenario.provision, 2)
        .await
        .expect("provision");
    assert_eq!(r.failed, 0);

    let log_path = dir.join("answers.jsonl");
    let extras = RunExtras {
        delivery: Arc::new(Delivery::new(
            Retransmit {
                max_retries: 10,
                wait_open: Duration::from_secs(5),
            },
            Some(AnswerLog::create(&log_path).expect("log")),
        )),
        series: None,
    };
    let setup = RunSetup {
        scenario: Arc::new(scenario),
        pcef: PcefOptions {
            target: server.diameter,
            peers: 2,
            request_timeout: Duration::from_secs(2),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        },
        cpu: CpuTargets::default(),
        progress: false,
    };
    let load = tokio::spawn({
        let (setup, extras) = (setup.clone(), extras.clone());
        async move {
            measure_with(
                &setup,
                Load::Open(OpenLoop {
                    rate: 150.0,
                    warmup: Duration::ZERO,
                    duration: Duration::from_secs(4),
                    seed: 5,
                }),
                &extras,
            )
            .await
        }
    });
    // Deliberately mid-run: the kill lands with requests in flight and
    // the 4 s run goes on past the restart.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    server.kill9();
    server.start();
    let report = load.await.expect("load task").expect("run");
    assert_eq!(
        extras
            .delivery
            .log
            .as_ref()
            .expect("log")
            .finish()
            .map(|n| n > 0),
        Ok(true)
    );
    assert!(
        report.delivery.retransmissions > 0,
        "the kill cost no retransmission: {:?}",
        report.delivery
    );

    server.kill9();
    server.start();
    let api = Api {
        base,
        token: None,
        connections: 2,
        accumulator: "monthly".into(),
    };
    let records = load_log(&log_path).expect("read log");
    let v = verify(&records, &api).await.expect("verify");
    assert!(v.passed(), "{}", v.summary());
    assert!(v.usage_exact + v.usage_within_bounds == v.subscribers && v.acknowledged_octets > 0);

    // A CCR-U the server never saw, claimed as acknowledged: a loss.
    let mut forged = records.clone();
    let real = records
        .iter()
        .find(|r| r.command == "CCR-U" && r.acknowledged())
        .expect("an acknowledged CCR-U");
    forged.push(AnswerRecord {
        number: 99,
        octets: 1_000,
        ..real.clone()
    });
    let v = verify(&forged, &api).await.expect("verify");
    assert!(!v.passed());
    assert_eq!((v.usage_lost, v.octets_lost), (1, 1_000), "{}", v.summary());
    drop(server);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
