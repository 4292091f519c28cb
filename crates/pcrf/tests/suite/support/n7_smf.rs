//! For the SBI tests: independent HTTP/2 peers played by Python scripts
//! ([`PythonPeer`]), and an SMF. Its notification side is such a peer
//! (tests/n7/smf_callback.py, Python's hypercorn) that
//! records what the PCF pushes; its client side sends the SMF's requests
//! over h2c with prior knowledge; `create_body` is open5gs's Create with
//! the notification URI pointing at the callback server.

use super::{free_port, poll_until};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An independent HTTP/2 peer played by a Python script of tests/n7/
/// (hypercorn over h2c) on a loopback port; every request it got, as the
/// JSON line it printed for it. Killed when dropped.
pub struct PythonPeer {
    child: Child,
    pub port: u16,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// The SMF's notification side (and an AF's, and a BSF): smf_callback.py.
pub type Callback = PythonPeer;

impl Drop for PythonPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PythonPeer {
    /// smf_callback.py on a free port.
    pub fn start() -> PythonPeer {
        PythonPeer::script("smf_callback.py", free_port())
    }

    /// tests/n7/`script` listening on `port`, once it accepts connections.
    pub fn script(script: &str, port: u16) -> PythonPeer {
        PythonPeer::script_with(script, port, &[])
    }

    /// As [`PythonPeer::script`], with `args` after the port.
    pub fn script_with(script: &str, port: u16, args: &[&str]) -> PythonPeer {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/n7")
            .join(script);
        let mut child = Command::new("python3")
            .arg(path)
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 with hypercorn (scripts/install-test-deps.sh)");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout");
        let sink = requests.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().expect("requests").push(v);
                }
            }
        });
        let up = poll_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "{script} did not start");
        PythonPeer {
            child,
            port,
            requests,
        }
    }

    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests").clone()
    }
}

/// The SMF's client: HTTP/2 with prior knowledge, as open5gs's SMF.
/// [`Smf::new`] brings a runtime of its own for blocking tests;
/// [`Smf::in_runtime`] is for async tests, which use [`Smf::send`].
pub struct Smf {
    rt: Option<tokio::runtime::Runtime>,
    client: reqwest::Client,
    /// http://127.0.0.1:PORT
    base: String,
    root: String,
}

impl Smf {
    pub fn new(sbi: u16) -> Smf {
        let mut smf = Smf::in_runtime(sbi);
        smf.rt = Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
        );
        smf
    }

    pub fn in_runtime(sbi: u16) -> Smf {
        Smf {
            rt: None,
            client: reqwest::Client::builder()
                .http2_prior_knowledge()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
            base: format!("http://127.0.0.1:{sbi}"),
            root: format!("http://127.0.0.1:{sbi}/npcf-smpolicycontrol/v1/sm-policies"),
        }
    }

    /// Status, Location and JSON body of `method` on `path` (from the
    /// listener's root, any API), from a blocking test; the body is sent
    /// as `content_type`.
    pub fn http(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> (u16, String, Value) {
        self.rt
            .as_ref()
            .expect("Smf::new for blocking calls")
            .block_on(async {
                let mut req = self.client.request(method, format!("{}{path}", self.base));
                if let Some(b) = body {
                    req = req
                        .header("content-type", content_type)
                        .body(b.to_string().into_bytes());
                }
                answer(req).await
            })
    }

    /// Status, Location and the JSON body of one request (GET, or POST of
    /// `body`, `{}` without one), from a blocking test.
    pub fn call(&self, post: bool, path: &str, body: Option<&Value>) -> (u16, String, Value) {
        self.rt
            .as_ref()
            .expect("Smf::new for blocking calls")
            .block_on(self.send(post, path, body))
    }

    /// As [`Smf::call`], from an async test.
    pub async fn send(&self, post: bool, path: &str, body: Option<&Value>) -> (u16, String, Value) {
        let url = format!("{}{path}", self.root);
        let req = if post {
            self.client
                .post(&url)
                .header("content-type", "application/json")
                .body(body.map_or_else(|| b"{}".to_vec(), |b| b.to_string().into_bytes()))
        } else {
            self.client.get(&url)
        };
        answer(req).await
    }
}

async fn answer(req: reqwest::RequestBuilder) -> (u16, String, Value) {
    {
        let r = req.send().await.expect("SBI answers");
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = r.text().await.expect("body");
        (
            status,
            location,
            serde_json::from_str(&text).unwrap_or(Value::Null),
        )
    }
}

pub fn create_body(callback: &Callback, notify_path: &str) -> Value {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/n7/open5gs-create.json"),
    )
    .expect("fixture");
    let mut body: Value = serde_json::from_str(&text).expect("json");
    body["notificationUri"] =
        Value::from(format!("http://127.0.0.1:{}{notify_path}", callback.port));
    body
}
