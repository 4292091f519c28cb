//! The allocator's own controls, for memory that should go back to the
//! system once it is no longer used: the `pcrf` binary allocates with
//! mimalloc, which keeps freed pages of each thread for reuse until that
//! thread allocates or frees again; a thread that then waits for a long
//! time (the store writer between bursts) would keep them resident.
//! These calls do nothing for memory the system allocator gave (the test
//! and bench binaries).

// The library that defines the functions below: named so that it is linked
// into every binary of this crate, not only those allocating with it.
use mimalloc as _;

// mimalloc's C API, in the library the `mimalloc` crate builds and links.
// Declared here: its Rust declarations come only with a feature that would
// add a crate the workspace does not otherwise need.
extern "C" {
    fn mi_collect(force: bool);
    fn mi_process_info(
        elapsed_msecs: *mut usize,
        user_msecs: *mut usize,
        system_msecs: *mut usize,
        current_rss: *mut usize,
        peak_rss: *mut usize,
        current_commit: *mut usize,
        peak_commit: *mut usize,
        page_faults: *mut usize,
    );
}

/// Returns the calling thread's free pages to the system (and those of
/// threads that ended): call it on a thread about to wait long.
pub fn return_idle_memory() {
    // SAFETY: takes no pointers; mimalloc collects the calling thread's
    // heap, which no other thread touches.
    unsafe { mi_collect(true) }
}

/// What mimalloc has committed, bytes, when this process allocates with
/// it; `None` when it does not (nothing was ever committed through it).
pub fn committed_bytes() -> Option<u64> {
    let mut v = [0usize; 8];
    let [elapsed, user, system, rss, peak_rss, commit, peak_commit, faults] = &mut v;
    // SAFETY: mimalloc writes each out-parameter, all valid for the call;
    // it reads no other memory of ours.
    unsafe {
        mi_process_info(
            elapsed,
            user,
            system,
            rss,
            peak_rss,
            commit,
            peak_commit,
            faults,
        );
    }
    let [_, _, _, _, _, commit, peak_commit, _] = v;
    (peak_commit > 0).then_some(commit as u64)
}
