//! Arms the sandbox's budget hook only when a call runs long. While any
//! count hook is set, Lua 5.4 traps on every VM instruction (it calls
//! `luaG_traceexec` for each one to count it down), which cost about 100
//! machine instructions per Lua instruction: most of a decision's time. A
//! decision takes tens of microseconds, so the hook stays off, and a timer
//! on the thread's CPU clock, started with each call, arms it once the
//! call has used `ARM_AFTER` of CPU time. From then on the hook counts the
//! instruction budget and checks the time limit as it always did, and a
//! runaway call is stopped with the same errors.
//!
//! The timer is a POSIX per-thread timer (`timer_create` on
//! `CLOCK_THREAD_CPUTIME_ID`, delivering a signal to this thread alone).
//! The signal handler calls `lua_sethook` for the state running on the
//! thread. That is the one way the Lua manual and source allow to set a
//! hook from outside the running code: `lua_sethook` "can be called during
//! a signal" (ldebug.c), and the standalone `lua` interpreter stops a
//! script on Ctrl-C exactly so. Calling it from another thread instead
//! would race with the interpreter (it walks the CallInfo list, which the
//! running thread changes and frees). Where no timer can be made (not
//! Linux, or the kernel refuses one), the hook is armed at the start of
//! every call, as before: slower, never weaker.

use mlua::{ffi, Lua};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

/// CPU time a call runs before the budget hook is armed. A decision takes
/// tens of microseconds (a few milliseconds under valgrind), so only a
/// runaway call ever reaches it; the instruction budget then counts from
/// here, so a call runs at most this long plus its budget.
pub const ARM_AFTER: Duration = Duration::from_millis(10);

/// The state running on a thread and mlua's hook function for it: what the
/// signal handler needs to arm the hook. Boxed by its owner so its address
/// stays put while a call runs.
pub(super) struct Armed {
    state: *mut ffi::lua_State,
    hook: ffi::lua_Hook,
    every: c_int,
}

/// Takes over the hook mlua installed on `lua` (with `Lua::set_hook`, so
/// that mlua keeps the callback and calls it, turning its errors into Lua
/// errors): remembers its function and turns it off until a call arms it.
pub(super) fn take_over(lua: &Lua, every: u32) -> mlua::Result<Box<Armed>> {
    let mut taken = None;
    // SAFETY: `exec_raw` runs the closure as a protected C call on the
    // state mlua runs every function on (its main state, as `set_hook`
    // used); lua_gethook and lua_sethook with no hook raise no error.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            if let Some(hook) = ffi::lua_gethook(state) {
                taken = Some((state, hook));
                ffi::lua_sethook(state, None, 0, 0);
            }
        })?;
    }
    let (state, hook) =
        taken.ok_or_else(|| mlua::Error::RuntimeError("no budget hook was set".into()))?;
    Ok(Box::new(Armed {
        state,
        hook,
        every: c_int::try_from(every).unwrap_or(c_int::MAX),
    }))
}

impl Armed {
    /// Sets the hook now (from ordinary code, or the signal handler).
    ///
    /// # Safety
    /// `self.state` must be alive: the VM that owns `self` also owns it.
    unsafe fn arm(&self) {
        ffi::lua_sethook(self.state, Some(self.hook), ffi::LUA_MASKCOUNT, self.every);
    }

    /// Whether the hook is set now (tests).
    #[cfg(test)]
    pub(super) fn is_armed(&self) -> bool {
        // SAFETY: as for `arm`; reads one field of the state.
        unsafe { ffi::lua_gethook(self.state).is_some() }
    }
}

thread_local! {
    /// The call running on this thread now, for the signal handler. An
    /// atomic pointer (one word, const-initialised, no destructor), so the
    /// handler reads it whole and without any lazy initialisation.
    static RUNNING: AtomicPtr<Armed> = const { AtomicPtr::new(std::ptr::null_mut()) };
}

/// One call under the watchdog: started by `watch`, ended when dropped.
pub(super) struct Watch<'a> {
    armed: &'a Armed,
    before: *mut Armed,
    timed: bool,
}

/// Starts watching the call about to run on `armed`'s state.
pub(super) fn watch(armed: &Armed) -> Watch<'_> {
    let me = armed as *const Armed as *mut Armed;
    let before = RUNNING.with(|r| r.swap(me, Ordering::SeqCst));
    let timed = timer::start(ARM_AFTER);
    if !timed {
        // SAFETY: ordinary code on the thread that owns the state.
        unsafe { armed.arm() };
    }
    Watch {
        armed,
        before,
        timed,
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if self.timed {
            timer::stop();
        }
        // Once RUNNING no longer names this state, a late signal arms
        // nothing; then the hook, armed or not, is turned off.
        RUNNING.with(|r| r.store(self.before, Ordering::SeqCst));
        // SAFETY: ordinary code on the owning thread; turning hooks off
        // raises no error.
        unsafe { ffi::lua_sethook(self.armed.state, None, 0, 0) };
        if !self.before.is_null() {
            // Calls do not nest today; if one ever did, the outer call's
            // timer was this one's, so its hook is armed at once.
            // SAFETY: the outer call's `Armed` outlives this inner call.
            unsafe { (*self.before).arm() };
        }
    }
}

/// The signal handler: arms the hook of the call running on this thread.
///
/// Async-signal-safe: it reads one thread-local atomic (native TLS, no
/// lazy initialisation) and calls `lua_sethook`, which Lua documents as
/// callable during a signal: it stores the hook, count and mask, and sets
/// the trap flag of the running Lua frames, which the interpreter checks at
/// its next jump or call (so a tight loop stops too). `Armed` outlives the
/// call, and RUNNING is cleared before the VM can be dropped.
#[cfg(target_os = "linux")]
extern "C" fn on_signal(_: c_int, _: *mut libc::siginfo_t, _: *mut std::ffi::c_void) {
    let armed = RUNNING.with(|r| r.load(Ordering::SeqCst));
    if !armed.is_null() {
        // SAFETY: see above.
        unsafe { (*armed).arm() };
    }
}

#[cfg(target_os = "linux")]
mod timer {
    //! The per-thread CPU-time timer that sends the signal.

    use std::sync::OnceLock;
    use std::time::Duration;

    /// The signal the timers send: a real-time signal nothing else in the
    /// process uses (glibc reserves those below SIGRTMIN, valgrind the top
    /// ones).
    fn signal() -> libc::c_int {
        libc::SIGRTMIN() + 2
    }

    /// Installs the handler once per process; false if it cannot be.
    fn handler_installed() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        *INSTALLED.get_or_init(|| {
            // SAFETY: a zeroed sigaction is valid; the handler is
            // async-signal-safe (see `on_signal`).
            unsafe {
                let handler: extern "C" fn(
                    libc::c_int,
                    *mut libc::siginfo_t,
                    *mut std::ffi::c_void,
                ) = super::on_signal;
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(signal(), &sa, std::ptr::null_mut()) == 0
            }
        })
    }

    /// A timer of this thread, deleted when the thread ends.
    struct Timer(libc::timer_t);

    impl Timer {
        fn create() -> Option<Timer> {
            if !handler_installed() {
                return None;
            }
            // SAFETY: a zeroed sigevent is valid; the kernel copies it.
            unsafe {
                let mut ev: libc::sigevent = std::mem::zeroed();
                ev.sigev_notify = libc::SIGEV_THREAD_ID;
                ev.sigev_signo = signal();
                ev.sigev_notify_thread_id = libc::gettid();
                let mut id: libc::timer_t = std::ptr::null_mut();
                if libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut ev, &mut id) == 0 {
                    Some(Timer(id))
                } else {
                    tracing::warn!(
                        error = %std::io::Error::last_os_error(),
                        "no CPU-time timer for the policy watchdog on this thread: \
                         the budget hook runs on every call"
                    );
                    None
                }
            }
        }

        fn set(&self, after: Duration) -> bool {
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: after.as_secs() as libc::time_t,
                    tv_nsec: after.subsec_nanos() as libc::c_long,
                },
            };
            // SAFETY: a timer this thread created and has not deleted.
            unsafe { libc::timer_settime(self.0, 0, &spec, std::ptr::null_mut()) == 0 }
        }
    }

    impl Drop for Timer {
        fn drop(&mut self) {
            // SAFETY: created by this thread, deleted once.
            unsafe { libc::timer_delete(self.0) };
        }
    }

    thread_local! {
        static TIMER: Option<Timer> = Timer::create();
    }

    /// Starts this thread's timer: it fires after `after` of this thread's
    /// CPU time. False when there is no timer (the caller arms at once).
    pub(super) fn start(after: Duration) -> bool {
        TIMER
            .try_with(|t| t.as_ref().is_some_and(|t| t.set(after)))
            .unwrap_or(false)
    }

    /// Stops this thread's timer.
    pub(super) fn stop() {
        let _ = TIMER.try_with(|t| {
            if let Some(t) = t {
                t.set(Duration::ZERO);
            }
        });
    }
}

#[cfg(not(target_os = "linux"))]
mod timer {
    //! No per-thread CPU timers: the hook is armed on every call.

    pub(super) fn start(_: std::time::Duration) -> bool {
        false
    }

    pub(super) fn stop() {}
}
