//! Completion notification for event-loop servers.
//!
//! When a queued request is decided (dispatched or rejected), the waker
//! libapf registered with its ticket ([`RequestWaker`]):
//! 1. marks the request decided and wakes threads blocked in
//!    `apf_request_wait` on it (a condition variable, not a spin);
//! 2. if the completion queue is on, appends the handle to it and makes the
//!    completion fd readable;
//! 3. calls the user's completion callback, if one is set, without holding
//!    any libapf lock.
//!
//! The completion queue is switched on by the first call to
//! `apf_dispatcher_completion_fd` or `apf_dispatcher_take_completion`, so a
//! server that only waits or polls does not accumulate handles nobody takes.
//! The fd is readable exactly while the queue is non-empty: libapf raises it
//! when the queue becomes non-empty and clears it when the queue is emptied.

use super::status::apf_status;
use crate::sync::{lock, Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::task::Wake;
use std::time::Duration;

/// A completion callback: `user` is the pointer given with it, `request` the
/// handle of a queued request that was just decided.
#[allow(non_camel_case_types)]
pub type apf_completion_callback = Option<unsafe extern "C" fn(user: *mut c_void, request: u64)>;

/// The user's pointer, passed back to the callback on whatever thread
/// decides a request.
#[derive(Clone, Copy)]
struct UserData(*mut c_void);

// SAFETY: libapf never dereferences the pointer; it only hands it back to
// the user's callback. `apf_dispatcher_set_completion_callback` documents
// that the callback and its pointer must be usable from any thread.
unsafe impl Send for UserData {}

struct CallbackState {
    callback: apf_completion_callback,
    user: UserData,
    /// Bumped by every change of callback; invocations are counted by the
    /// parity of the epoch they started in.
    epoch: u64,
    in_flight: [usize; 2],
}

struct Queue {
    enabled: bool,
    handles: VecDeque<u64>,
    signal: Option<Signal>,
    raised: bool,
}

/// One dispatcher's completion state, shared with the wakers of its
/// queued requests (which may outlive the dispatcher briefly).
pub(crate) struct Completion {
    queue: Mutex<Queue>,
    callback: Mutex<CallbackState>,
    callback_idle: Condvar,
    closed: AtomicBool,
}

thread_local! {
    /// The dispatchers (their `Completion`'s address) whose callbacks are
    /// running on this thread, innermost last: a callback may finish a
    /// request of another dispatcher, whose callback then runs nested.
    static IN_CALLBACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks a callback of one dispatcher as running on this thread.
struct CallbackScope;

impl CallbackScope {
    fn enter(completion: &Completion) -> CallbackScope {
        let _ = IN_CALLBACK.try_with(|c| c.borrow_mut().push(completion.id()));
        CallbackScope
    }
}

impl Drop for CallbackScope {
    fn drop(&mut self) {
        let _ = IN_CALLBACK.try_with(|c| c.borrow_mut().pop());
    }
}

impl Default for Completion {
    fn default() -> Self {
        Completion {
            queue: Mutex::new(Queue {
                enabled: false,
                handles: VecDeque::new(),
                signal: None,
                raised: false,
            }),
            callback: Mutex::new(CallbackState {
                callback: None,
                user: UserData(std::ptr::null_mut()),
                epoch: 0,
                in_flight: [0; 2],
            }),
            callback_idle: Condvar::new(),
            closed: AtomicBool::new(false),
        }
    }
}

impl Completion {
    /// A request was decided: queue it and call the callback.
    fn notify(&self, handle: u64) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        self.push(handle);
        self.invoke_callback(handle);
    }

    fn push(&self, handle: u64) {
        let mut q = lock(&self.queue);
        if !q.enabled {
            return;
        }
        q.handles.push_back(handle);
        if !q.raised {
            if let Some(signal) = &q.signal {
                signal.raise();
                q.raised = true;
            }
        }
    }

    /// The oldest decided request not yet taken.
    pub(crate) fn take(&self) -> Option<u64> {
        let mut q = lock(&self.queue);
        q.enabled = true;
        let handle = q.handles.pop_front();
        if q.handles.is_empty() && q.raised {
            if let Some(signal) = &q.signal {
                signal.clear();
            }
            q.raised = false;
        }
        handle
    }

    /// The fd that is readable while decided requests wait to be taken.
    pub(crate) fn fd(&self) -> std::io::Result<i32> {
        let mut q = lock(&self.queue);
        q.enabled = true;
        if q.signal.is_none() {
            q.signal = Some(Signal::new()?);
        }
        if !q.handles.is_empty() && !q.raised {
            if let Some(signal) = &q.signal {
                signal.raise();
            }
            q.raised = true;
        }
        Ok(q.signal.as_ref().map_or(-1, |s| s.read_fd()))
    }

    fn invoke_callback(&self, handle: u64) {
        let mut st = lock(&self.callback);
        let Some(callback) = st.callback else {
            return;
        };
        let user = st.user;
        let parity = (st.epoch & 1) as usize;
        st.in_flight[parity] += 1;
        drop(st);
        let scope = CallbackScope::enter(self);
        // SAFETY: `apf_dispatcher_set_completion_callback`'s contract: the
        // callback may be called from any thread with `user`, until it is
        // replaced or the dispatcher freed (both wait for this call).
        unsafe { callback(user.0, handle) };
        drop(scope);
        let mut st = lock(&self.callback);
        st.in_flight[parity] -= 1;
        if st.in_flight[parity] == 0 {
            self.callback_idle.notify_all();
        }
    }

    /// Replace the callback; returns once no call of the old one runs.
    ///
    /// Refused inside any completion callback, of this dispatcher or
    /// another: waiting there can deadlock. With this dispatcher's own
    /// callback the wait would be for itself; with another's, two threads
    /// each inside one dispatcher's callback, each replacing the other's
    /// callback, would each wait for the other's running call. The waits
    /// cannot be told apart cheaply from here, so none is tried.
    pub(crate) fn set_callback(
        &self,
        callback: apf_completion_callback,
        user: *mut c_void,
    ) -> Result<(), apf_status> {
        if in_any_callback() {
            return Err(apf_status::APF_ERR_IN_CALLBACK);
        }
        let mut st = lock(&self.callback);
        let old = (st.epoch & 1) as usize;
        st.callback = callback;
        st.user = UserData(user);
        st.epoch += 1;
        while st.in_flight[old] > 0 {
            st = match self.callback_idle.wait(st) {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
        Ok(())
    }

    /// This dispatcher's identity for [`CallbackScope`].
    fn id(&self) -> usize {
        self as *const Completion as usize
    }

    /// Whether one of this dispatcher's callbacks is running on this
    /// thread (it would wait for itself).
    pub(crate) fn in_own_callback(&self) -> bool {
        IN_CALLBACK
            .try_with(|c| c.borrow().contains(&self.id()))
            .unwrap_or(false)
    }
}

/// Whether any dispatcher's completion callback is running on this thread.
fn in_any_callback() -> bool {
    IN_CALLBACK
        .try_with(|c| !c.borrow().is_empty())
        .unwrap_or(false)
}

impl Completion {
    /// Stop notifying, and wait for running callbacks to return. Not to be
    /// called from inside one of this dispatcher's callbacks.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut st = lock(&self.callback);
        st.callback = None;
        while st.in_flight != [0, 0] {
            st = match self.callback_idle.wait(st) {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }

    /// Decided requests not yet taken.
    pub(crate) fn pending(&self) -> usize {
        lock(&self.queue).handles.len()
    }
}

/// The waker registered with a queued request's ticket.
pub(crate) struct RequestWaker {
    handle: AtomicU64,
    completion: Arc<Completion>,
    decided: Mutex<bool>,
    decided_cv: Condvar,
    /// Set before libapf cancels the ticket itself: the cancellation's own
    /// wake-up is not news to anyone.
    silenced: AtomicBool,
}

impl RequestWaker {
    pub(crate) fn new(completion: Arc<Completion>) -> Arc<RequestWaker> {
        Arc::new(RequestWaker {
            handle: AtomicU64::new(0),
            completion,
            decided: Mutex::new(false),
            decided_cv: Condvar::new(),
            silenced: AtomicBool::new(false),
        })
    }

    /// Record the handle before the waker is registered with the ticket.
    pub(crate) fn set_handle(&self, handle: u64) {
        self.handle.store(handle, Ordering::Release);
    }

    pub(crate) fn silence(&self) {
        self.silenced.store(true, Ordering::Release);
    }

    /// Block until the request is decided or `timeout` passes (None:
    /// forever). True if decided.
    ///
    /// The timeout is the caller's real time, whatever clock the dispatcher
    /// runs on: it bounds how long the caller's thread blocks.
    pub(crate) fn wait_decided(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut decided = lock(&self.decided);
        while !*decided {
            decided = match (timeout, deadline) {
                (None, _) | (Some(_), None) => match self.decided_cv.wait(decided) {
                    Ok(g) => g,
                    Err(poisoned) => poisoned.into_inner(),
                },
                (Some(_), Some(deadline)) => {
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    match self.decided_cv.wait_timeout(decided, deadline - now) {
                        Ok((g, _)) => g,
                        Err(poisoned) => poisoned.into_inner().0,
                    }
                }
            };
        }
        true
    }
}

impl Wake for RequestWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        *lock(&self.decided) = true;
        self.decided_cv.notify_all();
        if self.silenced.load(Ordering::Acquire) {
            return;
        }
        self.completion.notify(self.handle.load(Ordering::Acquire));
    }
}

/// A readable-when-raised file descriptor: an eventfd on Linux, a pipe
/// elsewhere.
struct Signal {
    read: i32,
    write: i32,
}

impl Signal {
    #[cfg(target_os = "linux")]
    fn new() -> std::io::Result<Signal> {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Signal {
            read: fd,
            write: fd,
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn new() -> std::io::Result<Signal> {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a writable array of two ints, as pipe requires.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for fd in fds {
            // SAFETY: fcntl on descriptors we just created and own.
            unsafe {
                libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        Ok(Signal {
            read: fds[0],
            write: fds[1],
        })
    }

    fn read_fd(&self) -> i32 {
        self.read
    }

    fn raise(&self) {
        let one: u64 = 1;
        // An eventfd takes an 8-byte counter increment; a pipe any byte.
        let len = if self.read == self.write { 8 } else { 1 };
        // SAFETY: writing `len` <= 8 bytes from a live u64 to our own fd. A
        // failure (EAGAIN: already readable) leaves the fd readable, which is
        // all that matters.
        let _ = unsafe { libc::write(self.write, (&one as *const u64).cast(), len) };
    }

    fn clear(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading at most 64 bytes into a live local buffer from
            // our own non-blocking fd.
            let n = unsafe { libc::read(self.read, buf.as_mut_ptr().cast(), buf.len()) };
            // An eventfd resets with one read; a pipe drains until EAGAIN.
            if n <= 0 || self.read == self.write {
                break;
            }
        }
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        // SAFETY: closing descriptors we created and nobody else closes.
        unsafe {
            libc::close(self.read);
            if self.write != self.read {
                libc::close(self.write);
            }
        }
    }
}
