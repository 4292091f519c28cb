//! Proves the codec's hot paths allocate nothing: selective decode of a
//! realistic Gx CCR-I (parse, pick, read values, walk the grouped
//! Subscription-Id), full validation, and encoding the CCA-I into a buffer
//! with room. A counting global allocator (this test binary only) counts
//! every allocation made by the measuring thread.
//!
//! The count is per thread, not one process-wide atomic: libtest runs tests
//! on parallel threads and their allocations must not be charged here.

#[path = "../benches/messages/gx.rs"]
mod gx;

use bytes::{Bytes, BytesMut};
use diameter::dict::{avp, enums};
use diameter::Message;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // const-initialised and without Drop, so reading it never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // try_with: during thread teardown the slot may be gone; those
    // allocations are not ours to count.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns what it returned and how many allocations
/// (alloc, alloc_zeroed, realloc) it made on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    let after = ALLOCATIONS.with(Cell::get);
    (out, after - before)
}

#[test]
fn the_counter_sees_allocations() {
    // Without this the zero-allocation tests below could not fail.
    let (v, n) = allocations(|| std::hint::black_box(vec![0u8; 64]));
    assert_eq!(v.len(), 64);
    assert_eq!(n, 1);
    let ccr = gx::ccr_initial();
    let (copy, n) = allocations(|| Message::parse(Bytes::copy_from_slice(&ccr)));
    assert!(copy.is_ok());
    assert!(n >= 1, "copying the message allocates, counted {n}");
    let (s, n) = allocations(|| {
        let m = Message::parse(ccr.clone()).expect("parse");
        m.session_id().expect("ok").map(str::to_owned)
    });
    assert_eq!(s.as_deref(), Some(gx::SESSION_ID));
    assert!(n >= 1, "to_owned allocates: {n}");
}

#[test]
fn selective_decode_allocates_nothing() {
    let ccr = gx::ccr_initial();
    // A second handle: what the transport keeps while a handler reads.
    let shared = ccr.clone();
    let (read, n) = allocations(move || {
        let m = Message::parse(ccr).expect("parse");
        let [sid, rt, rn, oh, sub] = m
            .pick(&[
                avp::SESSION_ID,
                avp::CC_REQUEST_TYPE,
                avp::CC_REQUEST_NUMBER,
                avp::ORIGIN_HOST,
                avp::SUBSCRIPTION_ID,
            ])
            .expect("well-formed");
        let session_len = sid.expect("Session-Id").as_str().expect("utf-8").len();
        let request_type = rt.expect("CC-Request-Type").as_enum().expect("4 bytes");
        let request_number = rn.expect("CC-Request-Number").as_u32().expect("4 bytes");
        let host_matches =
            oh.expect("Origin-Host").as_identity().expect("identity") == gx::PGW_HOST;
        let mut first = (-1, false);
        for a in sub.expect("Subscription-Id").grouped() {
            let a = a.expect("well-formed");
            if a.is(avp::SUBSCRIPTION_ID_TYPE) {
                first.0 = a.as_enum().expect("4 bytes");
            } else if a.is(avp::SUBSCRIPTION_ID_DATA) {
                first.1 = a.as_str().expect("utf-8") == gx::IMSI;
            }
        }
        // Every Subscription-Id, as a handler looking for the MSISDN would.
        let mut msisdn = false;
        for s in m.avps().filter_code(avp::SUBSCRIPTION_ID) {
            let s = s.expect("well-formed");
            let data = s.grouped().find(avp::SUBSCRIPTION_ID_DATA).expect("ok");
            msisdn |= data.is_some_and(|d| d.as_str() == Ok(gx::MSISDN));
        }
        (
            session_len,
            request_type,
            request_number,
            host_matches,
            first,
            msisdn,
        )
    });
    assert_eq!(
        read,
        (
            gx::SESSION_ID.len(),
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            gx::CC_REQUEST_NUMBER,
            true,
            (enums::SUBSCRIPTION_ID_TYPE::END_USER_IMSI, true),
            true
        )
    );
    assert_eq!(n, 0, "selective decode allocated {n} times");
    drop(shared);
}

#[test]
fn validate_allocates_nothing_on_valid_input() {
    for (bytes, expected) in [(gx::ccr_initial(), 54), (gx::cca_initial(), 55)] {
        let (visited, n) = allocations(move || {
            let m = Message::parse(bytes).expect("parse");
            m.validate()
        });
        assert_eq!(visited, Ok(expected));
        assert_eq!(n, 0, "validate() allocated {n} times");
    }
}

#[test]
fn encode_into_a_buffer_with_room_allocates_nothing() {
    let req = Message::parse(gx::ccr_initial()).expect("parse");
    let mut buf = BytesMut::with_capacity(4096);
    let (len, n) = allocations(|| gx::encode_cca_initial(&mut buf, &req));
    assert_eq!(
        n, 0,
        "encoding into a pre-reserved buffer allocated {n} times"
    );
    assert_eq!(&buf[..], &gx::cca_initial()[..]);
    assert_eq!(len, buf.len());
    // Reused, as a connection's write buffer is after each flush.
    buf.clear();
    let (_, n) = allocations(|| gx::encode_cca_initial(&mut buf, &req));
    assert_eq!(n, 0, "encoding into a reused buffer allocated {n} times");

    // An empty buffer must grow: the counter notices.
    let mut empty = BytesMut::new();
    let (_, n) = allocations(|| gx::encode_cca_initial(&mut empty, &req));
    assert!(n >= 1, "an empty buffer has to allocate, counted {n}");
}
