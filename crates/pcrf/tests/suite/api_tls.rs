//! The HTTP API over TLS (`[api.tls]`), end to end: the real `pcrf serve`
//! and `curl` as the client (`--cacert`, `--cert`), with certificates made
//! by rcgen. Shows that the right CA and token get through, that plain
//! HTTP, an untrusted server certificate and (with mutual TLS) a missing
//! client certificate are refused, that a silent client does not hold up
//! the others, and that `check-config` names a bad file.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "api-tls-test-token-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn scratch(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir =
        std::env::temp_dir().join(format!("pcrf-api-tls-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// PEM files: a CA, a server certificate for "localhost" and a client
/// certificate signed by it, and another CA that signed nothing here.
struct Pki {
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write pem");
    p
}

fn pki(dir: &Path) -> Pki {
    let ca = |name: &str| {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("ca");
        (cert.pem(), rcgen::Issuer::new(params, key))
    };
    let (ca_pem, issuer) = ca("API test CA");
    let (other_pem, _) = ca("Some other CA");
    let leaf = |name: &str| {
        let k = rcgen::KeyPair::generate().expect("key");
        let c = rcgen::CertificateParams::new(vec![name.to_string()])
            .expect("params")
            .signed_by(&k, &issuer)
            .expect("leaf");
        (c.pem(), k.serialize_pem())
    };
    let (cert, key) = leaf("localhost");
    let (client_cert, client_key) = leaf("operator.localhost");
    Pki {
        ca: write(dir, "ca.pem", &ca_pem),
        other_ca: write(dir, "other-ca.pem", &other_pem),
        cert: write(dir, "api.pem", &cert),
        key: write(dir, "api.key", &key),
        client_cert: write(dir, "client.pem", &client_cert),
        client_key: write(dir, "client.key", &client_key),
    }
}

/// A running `pcrf serve` whose API listens with TLS.
struct Server {
    child: Child,
    dir: PathBuf,
    api: SocketAddr,
    pki: Pki,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, api: SocketAddr, tls: &str) -> PathBuf {
    // Looked up apart from the API's, so the kernel may hand the same free
    // port back: the server then refuses two listeners on one socket.
    let diameter = std::iter::repeat_with(free_port)
        .find(|p| *p != api.port())
        .unwrap_or_default();
    let policy = dir.join("policy.lua");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::copy(root.join("policies/default.lua"), &policy).expect("copy policy");
    let text = format!(
        r#"
[node]
origin_host = "pcrf.test.local"
origin_realm = "test.local"

[diameter]
listen = "127.0.0.1:{diameter}"

[[peers]]
origin_host = "pgw.test.local"
addresses = ["127.0.0.1"]

[store]
path = "{data}"

[policy]
path = "{policy}"

[api]
listen = "{api}"
token = "{TOKEN}"
max_connections = 8
idle_timeout_secs = 30

[api.tls]
{tls}
"#,
        data = dir.join("data").display(),
        policy = policy.display(),
    );
    let path = dir.join("pcrf.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

impl Server {
    /// Starts with `[api.tls]` = certificate and key, plus `extra` keys.
    fn start(tag: &str, extra: &str) -> Server {
        let dir = scratch(tag);
        let pki = pki(&dir);
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let tls = format!(
            "certificate = {:?}\nprivate_key = {:?}\n{extra}",
            pki.cert.display().to_string(),
            pki.key.display().to_string(),
        )
        .replace("@CA@", &pki.ca.display().to_string());
        let cfg = config(&dir, api, &tls);
        let log = std::fs::File::create(dir.join("pcrf.log")).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_pcrf"))
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .current_dir(&dir)
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start pcrf");
        let mut s = Server {
            child,
            dir,
            api,
            pki,
        };
        s.wait_ready();
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pcrf.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            // --insecure only to learn that it is up; the tests check trust.
            // The client certificate is offered in case TLS is mutual.
            let cert = self.pki.client_cert.display().to_string();
            let key = self.pki.client_key.display().to_string();
            let probe = ["--insecure", "--cert", &cert, "--key", &key];
            if self.curl(&probe, "/v1/health").1 == "200" {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("pcrf exited at start-up ({status}):\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("pcrf did not become ready:\n{}", self.log());
    }

    fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://localhost:{}{path}", self.api.port())
    }

    /// curl over HTTPS with `args`; (exit code, HTTP status as curl prints
    /// it, "000" when there was no response).
    fn curl(&self, args: &[&str], path: &str) -> (i32, String) {
        self.curl_url(args, &self.url("https", path))
    }

    fn curl_url(&self, args: &[&str], url: &str) -> (i32, String) {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "8",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg("--resolve")
            .arg(format!("localhost:{}:127.0.0.1", self.api.port()))
            .args(args)
            .arg(url)
            .output()
            .expect("run curl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    }

    fn ca(&self) -> String {
        self.pki.ca.display().to_string()
    }
}

fn auth() -> String {
    format!("Authorization: Bearer {TOKEN}")
}

#[test]
fn https_with_the_right_ca_and_token_is_served() {
    let s = Server::start("ok", "");
    let ca = s.ca();
    let (code, status) = s.curl(&["--cacert", &ca, "-H", &auth()], "/v1/config");
    assert_eq!((code, status.as_str()), (0, "200"), "{}", s.log());
    // The token is still required over TLS.
    let (code, status) = s.curl(&["--cacert", &ca], "/v1/config");
    assert_eq!((code, status.as_str()), (0, "401"));
    assert!(s.log().contains("https"), "the listening line says https");
    // /metrics says when the served certificate expires (rcgen's default
    // notAfter, 4096-01-01).
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "8", "--cacert", &ca, "-H", &auth()])
        .arg("--resolve")
        .arg(format!("localhost:{}:127.0.0.1", s.api.port()))
        .arg(s.url("https", "/metrics"))
        .output()
        .expect("run curl");
    let scrape = String::from_utf8_lossy(&out.stdout);
    let not_after = jiff::civil::date(4096, 1, 1)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .expect("date")
        .timestamp()
        .as_second();
    assert!(
        scrape.contains(&format!(
            "pcrf_tls_certificate_expiry_timestamp_seconds{{listener=\"api\"}} {not_after}\n"
        )),
        "{scrape}"
    );
}

#[test]
fn plain_http_to_the_tls_port_fails() {
    let s = Server::start("plain", "");
    let url = s.url("http", "/v1/health");
    let (code, status) = s.curl_url(&["-H", &auth()], &url);
    assert!(
        code != 0 && status != "200",
        "plain HTTP got {code} {status}"
    );
    // The server is unharmed.
    let ca = s.ca();
    assert_eq!(s.curl(&["--cacert", &ca], "/v1/health").1, "200");
}

#[test]
fn a_client_not_trusting_the_ca_fails() {
    let s = Server::start("untrusted", "");
    let other = s.pki.other_ca.display().to_string();
    let (code, status) = s.curl(&["--cacert", &other, "-H", &auth()], "/v1/config");
    // 60: peer certificate cannot be authenticated with known CA certificates.
    assert_eq!((code, status.as_str()), (60, "000"));
}

#[test]
fn mutual_tls_refuses_a_client_without_a_certificate() {
    let s = Server::start(
        "mutual",
        "ca = \"@CA@\"\nrequire_client_certificate = true\n",
    );
    let ca = s.ca();
    let (code, status) = s.curl(&["--cacert", &ca, "-H", &auth()], "/v1/config");
    assert!(
        code != 0 && status == "000",
        "no client certificate got {code} {status}"
    );
    let cert = s.pki.client_cert.display().to_string();
    let key = s.pki.client_key.display().to_string();
    let (code, status) = s.curl(
        &[
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
            "-H",
            &auth(),
        ],
        "/v1/config",
    );
    assert_eq!((code, status.as_str()), (0, "200"), "{}", s.log());
    assert!(s.log().contains("HTTP API TLS handshake failed"));
}

#[test]
fn a_silent_client_does_not_stop_others() {
    let s = Server::start("silent", "");
    // Three clients connect and never send a ClientHello.
    let silent: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(s.api).expect("connect"))
        .collect();
    // No pause needed: the kernel queues connections in the order their
    // handshakes completed, so the server accepts the silent ones first.
    let ca = s.ca();
    let started = Instant::now();
    let (code, status) = s.curl(&["--cacert", &ca, "-H", &auth()], "/v1/config");
    let took = started.elapsed();
    assert_eq!((code, status.as_str()), (0, "200"), "{}", s.log());
    // The handshake timeout is 10 s: served well before any silent one ended.
    assert!(took < Duration::from_secs(8), "took {took:?}");
    // And the silent ones are dropped once the handshake timeout passes.
    let mut first = &silent[0];
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    let closed = matches!(first.read(&mut buf), Ok(0) | Err(_));
    assert!(closed, "silent client still connected");
    // The log line follows the close by a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s.log().contains("HTTP API TLS handshake timed out") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        s.log().contains("HTTP API TLS handshake timed out"),
        "{}",
        s.log()
    );
}

/// A token with too few different characters is refused by `check-config`,
/// which names the file and the key.
#[test]
fn check_config_refuses_a_guessable_token() {
    let dir = scratch("weak-token");
    let p = pki(&dir);
    let api: SocketAddr = "127.0.0.1:8443".parse().expect("addr");
    let cfg = config(
        &dir,
        api,
        &format!(
            "certificate = {:?}\nprivate_key = {:?}",
            p.cert.display().to_string(),
            p.key.display().to_string()
        ),
    );
    let strong = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .arg("check-config")
        .arg(&cfg)
        .output()
        .expect("run check-config");
    assert!(
        strong.status.success(),
        "{}",
        String::from_utf8_lossy(&strong.stderr)
    );
    for weak in ["aaaaaaaaaaaaaaaaaaaaaaaa", "abcabcabcabcabcabcabc"] {
        let text = std::fs::read_to_string(&cfg).expect("read config");
        let weak_cfg = dir.join("weak.toml");
        std::fs::write(
            &weak_cfg,
            text.replace(
                &format!("token = \"{TOKEN}\""),
                &format!("token = \"{weak}\""),
            ),
        )
        .expect("write config");
        let out = Command::new(env!("CARGO_BIN_EXE_pcrf"))
            .arg("check-config")
            .arg(&weak_cfg)
            .output()
            .expect("run check-config");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{weak} accepted");
        assert!(
            stderr.contains(&weak_cfg.display().to_string())
                && stderr.contains("api.token is too easy to guess"),
            "{stderr}"
        );
    }
}

#[test]
fn check_config_names_the_key_and_file_at_fault() {
    let dir = scratch("check");
    let p = pki(&dir);
    let missing = dir.join("nowhere.pem");
    let api: SocketAddr = "127.0.0.1:8443".parse().expect("addr");
    let cfg = config(
        &dir,
        api,
        &format!(
            "certificate = {:?}\nprivate_key = {:?}",
            missing.display().to_string(),
            p.key.display().to_string()
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .arg("check-config")
        .arg(&cfg)
        .output()
        .expect("run check-config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("api.tls.certificate") && stderr.contains(&missing.display().to_string()),
        "{stderr}"
    );

    let cfg = config(
        &dir,
        api,
        &format!(
            "certificate = {:?}\nprivate_key = {:?}",
            p.cert.display().to_string(),
            p.client_key.display().to_string()
        ),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .arg("serve")
        .arg("--config")
        .arg(&cfg)
        .current_dir(&dir)
        .output()
        .expect("run serve");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success());
    assert!(
        all.contains("api.tls.private_key") && all.contains("does not match"),
        "{all}"
    );
}

#[test]
fn subscribers_import_speaks_https_with_api_ca() {
    let s = Server::start("import", "");
    let csv = s.dir.join("subs.csv");
    std::fs::write(
        &csv,
        "imsi,msisdn,plan\n001010000000001,491700000001,basic\n001010000000002,491700000002,basic\n",
    )
    .expect("csv");
    let import = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pcrf"))
            .args(["subscribers", "import"])
            .arg(&csv)
            .args(["--api", &format!("https://localhost:{}", s.api.port())])
            .args(["--token", TOKEN])
            .args(extra)
            .output()
            .expect("run import")
    };
    let ca = s.ca();
    let out = import(&["--api-ca", &ca]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, status) = s.curl(
        &["--cacert", &ca, "-H", &auth()],
        "/v1/subscribers/001010000000002",
    );
    assert_eq!((code, status.as_str()), (0, "200"));
    // The wrong CA: refused before a byte of HTTP.
    let other = s.pki.other_ca.display().to_string();
    let out = import(&["--api-ca", &other]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TLS handshake"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
