//! Hostile Diameter input against the real server: connections that have
//! not sent a CER announcing huge messages, requests whose offending AVP is
//! huge, AVP flags that contradict the AVP, and floods of bad connections.
//! Each must cost the server little memory, answer bytes and log lines.

use crate::support;

use diameter::codec::{AvpCode, FLAG_E};
use diameter::dict::enums;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One sample of a metric (`name` with its labels, as the text says it).
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A Diameter header (a CER's) announcing `len` bytes, followed by
/// `body` bytes of filler: what a client that never finishes its first
/// message sends.
fn announced(len: u32, body: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + body);
    v.extend_from_slice(&len.to_be_bytes());
    v[0] = 1;
    v.extend_from_slice(&[0x80, 0, 1, 1]); // R bit, command 257 (CER)
    v.extend_from_slice(&[0; 12]);
    v.resize(20 + body, 7);
    v
}

/// Opens `n` connections, each sending `bytes`, and keeps them open
/// (whatever the server did with them).
async fn hold(addr: SocketAddr, n: usize, bytes: &[u8]) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        // The server may close the connection mid-way: that is the point.
        let _ = tokio::time::timeout(Duration::from_secs(5), s.write_all(bytes)).await;
        held.push(s);
    }
    held
}

/// 256 connections that never send a CER each announce a 1 MiB message
/// and send all of it but 4 bytes. Before the capabilities exchange a
/// message may be 16 KiB at most: each is closed at its header, the RSS
/// stays flat during and after (without the bound: +500 MiB during, most
/// of it kept after), and the closes are counted as too_long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_awaiting_cer_cannot_make_the_server_buffer_their_messages() {
    const CONNECTIONS: usize = 256;
    let p = Pcrf::start_with_diameter(
        "max_connections_awaiting_cer = 1024\ncer_timeout_secs = 60",
        "",
    );
    let before = rss_kib(p.pid());
    let held = hold(p.diameter, CONNECTIONS, &announced(1 << 20, (1 << 20) - 24)).await;
    // Every header has been read once every connection is counted.
    let too_long_line = "pcrf_diameter_errors_awaiting_cer_total{kind=\"too_long\"}";
    let metrics = eventually_async(
        p.waiting_for("every connection counted as too_long"),
        Duration::from_secs(10),
        || {
            let m = p.metrics();
            (metric(&m, too_long_line) >= CONNECTIONS as u64).then_some(m)
        },
    )
    .await;
    let during = rss_kib(p.pid());
    drop(held);
    eventually_async(
        p.waiting_for("no connection left awaiting CER"),
        Duration::from_secs(10),
        || (metric(&p.metrics(), "pcrf_diameter_connections_awaiting_cer") == 0).then_some(()),
    )
    .await;
    let after = rss_kib(p.pid());
    println!(
        "{CONNECTIONS} connections announcing 1 MiB: RSS {before} KiB before, {during} KiB during, {after} KiB after"
    );
    assert!(
        during < before + 32 * 1024,
        "RSS grew from {before} to {during} KiB\n{}",
        p.log()
    );
    assert!(
        after < before + 32 * 1024,
        "RSS {after} KiB after, {before} KiB before"
    );
    let too_long = metric(&metrics, too_long_line);
    assert_eq!(too_long, CONNECTIONS as u64, "{metrics}");
}

/// Messages within the per-message bound but never finished: all such
/// connections together hold at most `max_buffered_bytes_awaiting_cer`;
/// those that would pass it are closed and counted, and the bytes held
/// go back to 0 when the rest close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_awaiting_cer_share_one_byte_budget() {
    const BUDGET: u64 = 256 * 1024;
    let p = Pcrf::start_with_diameter(
        &format!(
            "max_connections_awaiting_cer = 1024\ncer_timeout_secs = 60\nmax_buffered_bytes_awaiting_cer = {BUDGET}"
        ),
        "",
    );
    // 64 connections with 12 KiB of a 16 KiB message each: 768 KiB wanted.
    let held = hold(p.diameter, 64, &announced(16 << 10, 12 << 10)).await;
    let buffered_line = "pcrf_diameter_buffered_bytes_awaiting_cer";
    let over_line = "pcrf_diameter_errors_awaiting_cer_total{kind=\"buffer_budget\"}";
    // The server reads the connections in its own time: wait until it has
    // closed enough of them over the budget and holds at least half of it.
    let metrics = eventually_async(
        p.waiting_for("40 connections closed over the budget and half of it held"),
        Duration::from_secs(10),
        || {
            let m = p.metrics();
            (metric(&m, over_line) >= 40 && metric(&m, buffered_line) >= BUDGET / 2).then_some(m)
        },
    )
    .await;
    let buffered = metric(&metrics, buffered_line);
    assert!(buffered <= BUDGET, "{buffered} bytes held\n{metrics}");
    drop(held);
    eventually_async(
        p.waiting_for("the bytes held to go back to 0 once the rest close"),
        Duration::from_secs(10),
        || (metric(&p.metrics(), buffered_line) == 0).then_some(()),
    )
    .await;
}

/// A CCR whose unknown mandatory AVP is 900 KB long is answered 5001 with
/// that AVP in Failed-AVP, shortened: the answer stays under 2 KiB (it
/// was 900 KB, the request echoed back).
#[tokio::test]
async fn a_huge_offending_avp_gets_a_small_error_answer() {
    let p = Pcrf::start("");
    p.provision(
        "001010000000001",
        r#"{"msisdn":"491700000001","plan":"basic"}"#,
    );
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let huge = vec![7u8; 900_000];
    let cca = pcef
        .ccr(
            "pgw.test.local;1;1",
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            |b| {
                initial_avps(b, "001010000000001");
                b.bytes(AvpCode::new(999_998, 0, true), &huge);
            },
        )
        .await;
    assert_eq!(result_of(&cca), 5001);
    assert!(cca.len() < 2048, "error answer of {} bytes", cca.len());
    let failed = cca
        .find(diameter::dict::avp::FAILED_AVP)
        .expect("ok")
        .expect("Failed-AVP");
    let inner = failed.grouped().next().expect("an AVP").expect("whole");
    assert_eq!(inner.code(), 999_998);
    pcef.close().await;
}

/// An AVP with the V bit and Vendor-ID 0 (which RFC 6733 §4.1 forbids) is
/// answered 3009 DIAMETER_INVALID_AVP_BITS with the E bit, not ignored.
#[tokio::test]
async fn the_v_bit_with_vendor_id_zero_is_answered_3009() {
    let p = Pcrf::start("");
    p.provision(
        "001010000000001",
        r#"{"msisdn":"491700000001","plan":"basic"}"#,
    );
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef
        .ccr(
            "pgw.test.local;1;1",
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            |b| {
                initial_avps(b, "001010000000001");
                // An AVP unknown to the dictionary, without the M bit: on
                // its own it would be ignored.
                let mut raw = 999_997u32.to_be_bytes().to_vec();
                raw.extend_from_slice(&[0x80, 0, 0, 16, 0, 0, 0, 0, 1, 2, 3, 4]);
                b.raw_avp(&raw);
            },
        )
        .await;
    assert_eq!(result_of(&cca), 3009);
    assert_eq!(cca.flags() & FLAG_E, FLAG_E, "a protocol error");
    pcef.close().await;
}

/// 1,000 connections that send an HTTP request to the Diameter port: each
/// is closed and counted, and the log gets a few warnings a second rather
/// than one per connection.
#[tokio::test]
async fn bad_connections_are_counted_and_their_warnings_rate_limited() {
    const BAD: usize = 1_000;
    let p = Pcrf::start("");
    let start = Instant::now();
    for _ in 0..BAD {
        let mut s = TcpStream::connect(p.diameter).await.expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nHost: pcrf\r\n\r\n")
            .await
            .expect("write");
        let mut buf = [0u8; 64];
        let closed = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "not closed: {closed:?}"
        );
    }
    let seconds = start.elapsed().as_secs();
    let metrics = p.metrics();
    let log = p.log();
    let lines = log.lines().filter(|l| l.contains("bad framing")).count();
    println!("{BAD} bad connections in {seconds} s: {lines} log lines");
    assert_eq!(
        metric(
            &metrics,
            "pcrf_diameter_errors_awaiting_cer_total{kind=\"framing\"}"
        ),
        BAD as u64
    );
    // Ten a second, in every second the flood touched.
    let bound = 10 * (seconds as usize + 2);
    assert!(lines >= 1, "no warning at all");
    assert!(lines <= bound, "{lines} warning lines (at most {bound})");
}
