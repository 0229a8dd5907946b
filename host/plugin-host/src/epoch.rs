//! The epoch ticker behind plugins' time limits: it advances the engine's epoch every
//! [`EPOCH_TICK`] while a call is in flight, and parks while none is, so an idle operator
//! takes no wake-ups for it (a ticker that never stops woke the process 100 times a second).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::Engine;

/// Interval of the epoch ticker; time limits are rounded up to it.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Shared between the ticker thread and the calls.
#[derive(Default)]
struct State {
    in_flight: AtomicUsize,
    stop: AtomicBool,
    parked: AtomicBool,
    ticks: AtomicU64,
}

/// Owner of the ticker thread; dropping it stops the thread.
pub(super) struct EpochTicker {
    state: Arc<State>,
    thread: std::thread::Thread,
}

impl EpochTicker {
    /// Starts the thread `wasmop-epoch` for `engine`.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub(super) fn start(engine: Engine) -> std::io::Result<Self> {
        let state = Arc::new(State::default());
        let shared = state.clone();
        let handle = std::thread::Builder::new()
            .name("wasmop-epoch".into())
            .spawn(move || {
                while !shared.stop.load(Ordering::Acquire) {
                    if shared.in_flight.load(Ordering::Acquire) == 0 {
                        shared.parked.store(true, Ordering::Release);
                        // A call starting after the check above unparks us, and an unpark that
                        // comes before `park` makes it return at once: no start is missed.
                        std::thread::park();
                        shared.parked.store(false, Ordering::Release);
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    // Counted before the epoch moves, so a call stopped by it finds it counted.
                    shared.ticks.fetch_add(1, Ordering::Release);
                    engine.increment_epoch();
                }
            })?;
        Ok(Self {
            state,
            thread: handle.thread().clone(),
        })
    }

    /// Marks a call in flight until the guard drops; the ticker's first tick comes one
    /// [`EPOCH_TICK`] after it wakes (at once if it is already ticking for another call).
    pub(super) fn in_flight(&self) -> InFlight<'_> {
        if self.state.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        InFlight(self)
    }

    /// Whether the thread is parked (no call in flight).
    pub(super) fn parked(&self) -> bool {
        self.state.parked.load(Ordering::Acquire)
    }

    /// Ticks so far.
    pub(super) fn ticks(&self) -> u64 {
        self.state.ticks.load(Ordering::Acquire)
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// A call in flight; see [`EpochTicker::in_flight`].
pub(super) struct InFlight<'a>(&'a EpochTicker);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.state.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
