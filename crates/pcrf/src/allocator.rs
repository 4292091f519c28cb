//! The allocators' own controls, for memory that should go back to the
//! system once it is no longer used. The `pcrf` binary allocates with
//! mimalloc, which keeps freed pages of each thread for reuse until that
//! thread allocates or frees again; a thread that then waits for a long
//! time (the store writer between bursts) would keep them resident.
//! SQLite allocates with the C library's `malloc`, whose arenas keep what
//! is freed in their middle: the page cache the store gives back when it
//! goes quiet (48 MiB after a seed run) stayed resident until trimmed.

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
/// threads that ended), and the C heap's whole free pages: call it on a
/// thread about to wait long, after freeing what it held.
pub fn return_idle_memory() {
    // SAFETY: takes no pointers; mimalloc collects the calling thread's
    // heap, which no other thread touches.
    unsafe { mi_collect(true) }
    trim_c_heap();
}

/// Gives back every whole free page of the C library's heap (glibc's
/// `malloc_trim(0)`, which also releases pages in the middle of its
/// arenas, not only at their top). It takes each arena's lock in turn:
/// a few milliseconds, while the caller is idle anyway.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_c_heap() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: glibc's own function, callable from any thread at any time;
    // it reads and writes no memory of ours.
    unsafe {
        malloc_trim(0);
    }
}

/// Other C libraries return free memory on their own terms.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_c_heap() {}

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

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::trim_c_heap;

    /// Anonymous resident memory, KiB (the heap's pages among them).
    fn resident_anon_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status
            .lines()
            .find(|l| l.starts_with("RssAnon:"))
            .expect("RssAnon");
        let kib = line.trim_start_matches("RssAnon:").trim_end_matches("kB");
        kib.trim().parse().expect("a number of KiB")
    }

    #[test]
    fn trimming_gives_back_free_pages_in_the_middle_of_the_c_heap() {
        // The test binary allocates with the C library's malloc. 64 MiB in
        // blocks far below its mmap threshold, so from its heap, touched.
        let blocks: Vec<Box<[u8]>> = (0..16_384)
            .map(|_| vec![1u8; 4000].into_boxed_slice())
            .collect();
        // Every 64th is kept (the last among them): the heap's top stays
        // in use, so freeing the rest gives nothing back by itself.
        let kept: Vec<Box<[u8]>> = blocks
            .into_iter()
            .enumerate()
            .filter_map(|(i, b)| (i % 64 == 63).then_some(b))
            .collect();
        let before = resident_anon_kib();
        trim_c_heap();
        let after = resident_anon_kib();
        assert!(
            before.saturating_sub(after) > 32 * 1024,
            "resident {before} KiB -> {after} KiB"
        );
        assert_eq!(kept.len(), 256);
    }
}
