//! WebAssembly functions, compiled by wasmtime's Cranelift and called like
//! any built-in (`Function`). The ABI a module implements is in
//! docs/FUNCTIONS.md: it exports `memory`, `alloc(len) -> ptr` and
//! `handle(ptr, len) -> i64` (reply pointer << 32 | reply length, or
//! negative for an error), and imports nothing.
//!
//! Each worker thread has its own instance (`Store`) of each function, kept
//! in a thread-local list: no lock on the hot path. A call is bounded in
//! CPU time, read at the ticks of one engine-wide epoch ticker thread
//! (`Caps::tick`), and in memory by a `ResourceLimiter`. A call that traps, runs out of time or memory
//! fails (the invoker counts it in `failed` and drops the request) and its
//! instance is thrown away: the next call on that worker gets a fresh one.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use wasmtime::{
    Config, Engine, Instance, InstancePre, Linker, Memory, Module, ResourceLimiter, Store, Trap,
    TypedFunc, UpdateDeadline,
};

/// The engine's epoch counts time in these units: a call's deadline is a
/// whole number of them.
pub const EPOCH_UNIT: Duration = Duration::from_micros(100);

/// Units the epoch moves at a time while no live function asks for the
/// fine tick: one wake-up per millisecond.
const COARSE_STEP: u64 = 10;

/// A function whose timeout is below this asks for the fine tick (one
/// `EPOCH_UNIT`), so that it is stopped within 200 us of its timeout
/// rather than within 2 ms.
pub const FINE_BELOW: Duration = Duration::from_millis(10);

/// The smallest and largest time limit a function may have.
pub const MIN_TIMEOUT: Duration = EPOCH_UNIT;
pub const MAX_TIMEOUT: Duration = Duration::from_secs(10);
/// One WebAssembly page: the least memory a function can have.
pub const MIN_MEMORY: u64 = 64 << 10;
/// A 32-bit linear memory's largest size.
pub const MAX_MEMORY: u64 = 4 << 30;

/// Per-function limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmLimits {
    /// Largest linear memory (bytes) an instance may have; growing past it
    /// traps, and a module that starts larger is refused.
    pub memory: usize,
    /// The CPU time a call may use: it is stopped no sooner than that and
    /// at most about two ticks later (`Caps::tick`), unless it is starved
    /// of CPU past `wall_backstop` of wall time.
    pub timeout: Duration,
}

impl Default for WasmLimits {
    fn default() -> Self {
        WasmLimits {
            memory: 16 << 20,
            timeout: Duration::from_millis(10),
        }
    }
}

impl WasmLimits {
    /// Limits as a user gives them, checked: a one-line reason otherwise.
    pub fn new(memory: u64, timeout: Duration) -> Result<WasmLimits, String> {
        if !(MIN_MEMORY..=MAX_MEMORY).contains(&memory) {
            return Err(format!(
                "memory of {memory} bytes: expected 64KiB..=4GiB (WebAssembly pages of 64 KiB, 32-bit addresses)"
            ));
        }
        if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout) {
            return Err(format!(
                "timeout of {timeout:?}: expected {MIN_TIMEOUT:?}..={MAX_TIMEOUT:?} (the time limit's tick is {EPOCH_UNIT:?})"
            ));
        }
        Ok(WasmLimits {
            memory: memory as usize,
            timeout,
        })
    }

    /// Whether calls under these limits need the fine tick.
    fn fine(&self) -> bool {
        self.timeout < FINE_BELOW
    }
}

/// Why calls of one function failed, summed over workers. Each failed call
/// is in exactly one.
#[derive(Debug, Default)]
pub struct WasmErrors {
    /// The guest trapped (unreachable, out-of-bounds access, stack
    /// exhausted, division by zero, ...).
    pub trapped: AtomicU64,
    /// Stopped by the time limit.
    pub timed_out: AtomicU64,
    /// Tried to grow its memory past the cap.
    pub memory_cap: AtomicU64,
    /// `handle` returned a negative value: the function's own error.
    pub refused: AtomicU64,
    /// `alloc` or `handle` returned a range outside the guest's memory.
    pub bad_range: AtomicU64,
    /// A fresh instance could not be made (e.g. its start function trapped).
    pub instantiation: AtomicU64,
}

/// Live functions that need the fine tick, and a sequence of their
/// arrivals that the ticker acknowledges once it ticks finely for them.
static FINE_USERS: AtomicU64 = AtomicU64::new(0);
static FINE_ASKED: AtomicU64 = AtomicU64::new(0);
static FINE_SEEN: AtomicU64 = AtomicU64::new(0);

impl WasmErrors {
    /// Each reason with its count, as JSON.
    pub fn by_reason(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "trapped": get(&self.trapped),
            "timed_out": get(&self.timed_out),
            "memory_cap": get(&self.memory_cap),
            "refused": get(&self.refused),
            "bad_range": get(&self.bad_range),
            "instantiation": get(&self.instantiation),
        })
    }
}

/// One engine for every WebAssembly function: compiled code is shared by
/// the workers' instances, and one thread moves its epoch on for the life
/// of the process: one `EPOCH_UNIT` every 100 us while a live function
/// has a timeout under `FINE_BELOW`, else `COARSE_STEP` units every
/// millisecond. The epoch only counts time that has passed (a late wake-up
/// makes it lag, never lead); a call's limit is on its CPU time, read at
/// its ticks (`Caps::tick`).
fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        // Epochs rather than fuel: a check at loop heads and calls against
        // a counter, much cheaper than fuel's count of every block.
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("the default wasmtime config is valid");
        let ticking = engine.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                // Safety: PR_SET_TIMERSLACK takes a plain integer and only
                // changes this thread's timer slack (default 50 us, half a
                // fine tick) to 1 ns.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
                loop {
                    let asked = FINE_ASKED.load(Ordering::SeqCst);
                    let step = if FINE_USERS.load(Ordering::SeqCst) > 0 {
                        FINE_SEEN.store(asked, Ordering::SeqCst);
                        1
                    } else {
                        COARSE_STEP
                    };
                    std::thread::sleep(EPOCH_UNIT * step as u32);
                    for _ in 0..step {
                        ticking.increment_epoch();
                    }
                }
            })
            .expect("spawning the wasm epoch thread");
        engine
    })
}

/// Holds the fine tick while a function that needs it lives; made only
/// once the ticker ticks finely, so the function's first call already has
/// its fine deadline.
struct FineTick;

impl FineTick {
    fn hold() -> FineTick {
        engine();
        FINE_USERS.fetch_add(1, Ordering::SeqCst);
        let asked = FINE_ASKED.fetch_add(1, Ordering::SeqCst) + 1;
        // The ticker acknowledges within one coarse step (bounded wait).
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while FINE_SEEN.load(Ordering::SeqCst) < asked && std::time::Instant::now() < until {
            std::thread::sleep(EPOCH_UNIT);
        }
        FineTick
    }
}

impl Drop for FineTick {
    fn drop(&mut self) {
        FINE_USERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Epoch units that cover `d`: at least one.
fn units(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(EPOCH_UNIT.as_nanos()) as u64).max(1)
}

/// What a store holds for the call running in it: the memory cap
/// (wasmtime's `ResourceLimiter`, which remembers that it refused, so the
/// failed call is counted as a memory failure) and the time limit.
struct Caps {
    max: usize,
    hit: bool,
    timeout: Duration,
    /// The thread's CPU time and the time at the first tick in the call.
    first_tick: Option<(Duration, std::time::Instant)>,
}

/// The most wall time a call may take after its first tick, however
/// little CPU it was given: ten times its timeout, at least 100 ms more.
fn wall_backstop(timeout: Duration) -> Duration {
    (timeout * 10).max(timeout + Duration::from_millis(100))
}

impl Caps {
    /// Readies `store` for a call: its CPU time is counted from the
    /// epoch's next tick.
    fn start_call(store: &mut Store<Caps>) {
        store.data_mut().first_tick = None;
        store.set_epoch_deadline(1);
    }

    /// What the epoch deadline does when it passes. The epoch counts wall
    /// time, and a worker preempted for longer than a short timeout would
    /// otherwise fail a call that did nothing wrong; so the limit is on CPU
    /// time. At the first tick in a call the thread's CPU clock is read,
    /// and the call is stopped once it has used its timeout of CPU since:
    /// never before it used its timeout in all, and a call that keeps its
    /// CPU busy at most a tick (before that first one) and the ticker's
    /// granularity later. The clocks are read only at ticks: a call that
    /// ends before the next one (nearly every call) never reads them. A
    /// call starved of CPU (a crowded or throttled CPU, page faults that
    /// wait) is still stopped once `wall_backstop` has passed since its
    /// first tick: it holds a worker and what queues behind it.
    fn tick(&mut self) -> UpdateDeadline {
        let (cpu, wall) = (peregrine_host::cpu::thread_cpu(), std::time::Instant::now());
        let (cpu_since, wall_since) = *self.first_tick.get_or_insert((cpu, wall));
        if wall.duration_since(wall_since) >= wall_backstop(self.timeout) {
            return UpdateDeadline::Interrupt;
        }
        match self.timeout.checked_sub(cpu.saturating_sub(cpu_since)) {
            Some(left) if !left.is_zero() => UpdateDeadline::Continue(units(left)),
            _ => UpdateDeadline::Interrupt,
        }
    }
}

/// Tables (indirect call targets) an instance may have, in elements.
const MAX_TABLE_ELEMENTS: usize = 10_000;

impl ResourceLimiter for Caps {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit = true;
            // An error, not `Ok(false)`: the call traps at once instead of
            // the guest seeing -1 and perhaps trying again.
            return Err(wasmtime::format_err!(
                "memory cap of {} bytes reached",
                self.max
            ));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// A WebAssembly function: its compiled module, limits and error counts.
pub struct WasmFunction {
    name: String,
    shared: Arc<Shared>,
}

/// What every worker's instance of one function shares.
struct Shared {
    /// Unique for the process: finds this function's instance in a
    /// worker's list.
    id: u64,
    pre: InstancePre<Caps>,
    limits: WasmLimits,
    errors: WasmErrors,
    /// Keeps the epoch ticking finely while this function lives.
    _fine: Option<FineTick>,
}

/// One worker's instance of a function, with its exports.
struct Guest {
    store: Store<Caps>,
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    handle: TypedFunc<(i32, i32), i64>,
}

thread_local! {
    /// This thread's instances: (function id, the function while it lives,
    /// its instance). A handful per worker, so a scan beats hashing.
    static INSTANCES: RefCell<Vec<(u64, Weak<Shared>, Guest)>> = const { RefCell::new(Vec::new()) };
}

/// How a call failed.
enum Failure {
    Trapped(String),
    TimedOut,
    MemoryCap,
    Refused(i64),
    BadRange(&'static str),
    Instantiation(String),
}

impl Failure {
    /// Whether the instance may be left in a state its code never meant
    /// (stopped midway): then it is replaced.
    fn spoils_instance(&self) -> bool {
        !matches!(self, Failure::Refused(_) | Failure::BadRange(_))
    }
}

/// A wasmtime error as one line: its chain joined, source excerpts (WAT
/// parse errors quote the offending line) left out.
fn one_line(e: &wasmtime::Error) -> String {
    format!("{e:#}")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|') && !l.contains(" | "))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Instantiates `pre` in a new store capped by `limits`.
fn instantiate(pre: &InstancePre<Caps>, limits: &WasmLimits) -> Result<Guest, Failure> {
    let mut store = Store::new(
        engine(),
        Caps {
            max: limits.memory,
            hit: false,
            timeout: limits.timeout,
            first_tick: None,
        },
    );
    store.limiter(|cap| cap as &mut dyn ResourceLimiter);
    store.epoch_deadline_callback(|mut cx| Ok(cx.data_mut().tick()));
    Caps::start_call(&mut store);
    let instance = pre.instantiate(&mut store).map_err(|e| {
        if store.data().hit {
            Failure::MemoryCap
        } else {
            Failure::Instantiation(one_line(&e))
        }
    })?;
    exports(&mut store, instance)
        .map_err(Failure::Instantiation)
        .map(|(memory, alloc, handle)| Guest {
            store,
            memory,
            alloc,
            handle,
        })
}

type Exports = (Memory, TypedFunc<i32, i32>, TypedFunc<(i32, i32), i64>);

/// The ABI's exports of `instance`, or what is missing or mistyped.
fn exports(store: &mut Store<Caps>, instance: Instance) -> Result<Exports, String> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or("exports no memory named \"memory\"")?;
    let alloc = instance
        .get_typed_func::<i32, i32>(&mut *store, "alloc")
        .map_err(|_| "export \"alloc\" must be (func (param i32) (result i32))")?;
    let handle = instance
        .get_typed_func::<(i32, i32), i64>(&mut *store, "handle")
        .map_err(|_| "export \"handle\" must be (func (param i32 i32) (result i64))")?;
    Ok((memory, alloc, handle))
}

impl Guest {
    /// Runs one request through the guest; its reply is appended to `reply`.
    fn call(&mut self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), Failure> {
        let len = i32::try_from(request.len()).map_err(|_| Failure::BadRange("request"))?;
        Caps::start_call(&mut self.store);
        let ptr = self
            .alloc
            .call(&mut self.store, len)
            .map_err(|e| self.failure(&e))?;
        let at = guest_range(ptr as u32, request.len());
        self.memory
            .data_mut(&mut self.store)
            .get_mut(at)
            .ok_or(Failure::BadRange("alloc"))?
            .copy_from_slice(request);
        let packed = self
            .handle
            .call(&mut self.store, (ptr, len))
            .map_err(|e| self.failure(&e))?;
        if packed < 0 {
            return Err(Failure::Refused(packed));
        }
        let at = guest_range((packed >> 32) as u32, packed as u32 as usize);
        let out = self
            .memory
            .data(&self.store)
            .get(at)
            .ok_or(Failure::BadRange("handle"))?;
        reply.extend_from_slice(out);
        Ok(())
    }

    /// Classifies an error a guest call returned.
    fn failure(&self, e: &wasmtime::Error) -> Failure {
        if self.store.data().hit {
            return Failure::MemoryCap;
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Failure::TimedOut,
            _ => Failure::Trapped(one_line(e)),
        }
    }
}

/// `len` bytes at guest address `ptr`, as a range of its memory.
fn guest_range(ptr: u32, len: usize) -> std::ops::Range<usize> {
    let start = ptr as usize;
    start..start.saturating_add(len)
}

/// A process-unique function id.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl WasmFunction {
    /// Loads a module from a .wasm or .wat file; named after the file.
    pub fn load(path: &Path, limits: WasmLimits) -> Result<WasmFunction, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("wasm")
            .to_string();
        WasmFunction::new(&name, &bytes, limits).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Compiles `module` (WebAssembly binary or WAT text) and checks that
    /// it implements the ABI by making one instance under `limits`; the
    /// error is one line.
    pub fn new(name: &str, module: &[u8], limits: WasmLimits) -> Result<WasmFunction, String> {
        let module = Module::new(engine(), module).map_err(|e| one_line(&e))?;
        if let Some(import) = module.imports().next() {
            return Err(format!(
                "imports {}::{}: a function may import nothing",
                import.module(),
                import.name()
            ));
        }
        let pre = Linker::<Caps>::new(engine())
            .instantiate_pre(&module)
            .map_err(|e| one_line(&e))?;
        // Before the first instance: its start function has the deadline
        // of every later call.
        let fine = limits.fine().then(FineTick::hold);
        match instantiate(&pre, &limits) {
            Ok(_) => {}
            Err(Failure::MemoryCap) => {
                return Err(format!(
                    "its initial memory is above the cap of {} bytes",
                    limits.memory
                ))
            }
            Err(Failure::Instantiation(why) | Failure::Trapped(why)) => return Err(why),
            Err(Failure::TimedOut) => return Err("its start function ran out of time".into()),
            Err(Failure::Refused(_) | Failure::BadRange(_)) => {
                unreachable!("instantiation runs neither alloc nor handle")
            }
        }
        Ok(WasmFunction {
            name: name.to_string(),
            shared: Arc::new(Shared {
                id: next_id(),
                pre,
                limits,
                errors: WasmErrors::default(),
                _fine: fine,
            }),
        })
    }

    pub fn limits(&self) -> WasmLimits {
        self.shared.limits
    }

    /// Why its calls failed, over all workers.
    pub fn errors(&self) -> &WasmErrors {
        &self.shared.errors
    }

    /// Counts `f` and says it in one line.
    fn count(&self, f: &Failure) -> String {
        let e = &self.shared.errors;
        let (counter, why) = match f {
            Failure::Trapped(why) => (&e.trapped, format!("trapped: {why}")),
            Failure::TimedOut => (
                &e.timed_out,
                format!("ran longer than {:?}", self.shared.limits.timeout),
            ),
            Failure::MemoryCap => (
                &e.memory_cap,
                format!("memory past the cap of {} bytes", self.shared.limits.memory),
            ),
            Failure::Refused(code) => (&e.refused, format!("returned error {code}")),
            Failure::BadRange(export) => (
                &e.bad_range,
                format!("{export} returned a range outside its memory"),
            ),
            Failure::Instantiation(why) => (&e.instantiation, format!("instantiation: {why}")),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        format!("{}: {why}", self.name)
    }
}

impl WasmFunction {
    /// The name it was deployed under (the file's stem when loaded).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the function on `request` into `reply` in this thread's
    /// instance (made on first use); a failure is counted and named.
    pub fn call(&self, request: &[u8], reply: &mut Vec<u8>) -> Result<(), String> {
        let shared = &self.shared;
        INSTANCES.with_borrow_mut(|list| {
            let at = match list.iter().position(|(id, _, _)| *id == shared.id) {
                Some(at) => at,
                None => {
                    // Instances of functions dropped since go with this one.
                    list.retain(|(_, f, _)| f.strong_count() > 0);
                    let guest =
                        instantiate(&shared.pre, &shared.limits).map_err(|f| self.count(&f))?;
                    list.push((shared.id, Arc::downgrade(shared), guest));
                    list.len() - 1
                }
            };
            let result = list[at].2.call(request, reply);
            result.map_err(|f| {
                if f.spoils_instance() {
                    list.swap_remove(at);
                }
                reply.clear();
                self.count(&f)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::functions::{Echo, Function, Reverse};

    fn example(name: &str) -> WasmFunction {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/functions")
            .join(name);
        WasmFunction::load(&path, TEST_LIMITS).unwrap()
    }

    const TEST_LIMITS: WasmLimits = WasmLimits {
        memory: 1 << 20,
        timeout: Duration::from_millis(10),
    };

    /// Held by the tests that time calls, and by the one that crowds a CPU
    /// with busy threads, so that no other test's load skews them.
    static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn call(f: &dyn Function, request: &[u8]) -> Result<Vec<u8>, String> {
        let mut reply = Vec::new();
        f.call(request, &mut reply).map(|()| reply)
    }

    /// `n` bytes that differ from their neighbours, varying with `n`.
    fn request(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 131 + n * 7 + 1) as u8).collect()
    }

    #[test]
    fn wat_examples_answer_as_the_builtins_do() {
        let (reverse, echo) = (example("reverse.wat"), example("echo.wat"));
        assert_eq!(reverse.name(), "reverse");
        for n in 0..=1400 {
            let req = request(n);
            assert_eq!(
                call(&reverse, &req),
                call(&Reverse, &req),
                "reverse, {n} bytes"
            );
            assert_eq!(call(&echo, &req), call(&Echo, &req), "echo, {n} bytes");
        }
        // Larger than the first page: alloc grows the memory.
        let big = request(60_000);
        assert_eq!(call(&reverse, &big), call(&Reverse, &big));
        let e = reverse.errors();
        assert_eq!(e.trapped.load(Ordering::Relaxed), 0);
        assert_eq!(e.bad_range.load(Ordering::Relaxed), 0);
    }

    /// Each misbehaving example fails its bad request within bounds, is
    /// counted once under its reason, and the next call on this thread (a
    /// fresh instance) and other functions still answer.
    #[test]
    fn traps_loops_and_memory_hogs_are_contained() {
        let _timing = TIMING.lock().unwrap_or_else(|e| e.into_inner());
        let reverse = example("reverse.wat");
        let trapped: fn(&WasmErrors) -> u64 = |e| e.trapped.load(Ordering::Relaxed);
        let timed_out: fn(&WasmErrors) -> u64 = |e| e.timed_out.load(Ordering::Relaxed);
        let memory_cap: fn(&WasmErrors) -> u64 = |e| e.memory_cap.load(Ordering::Relaxed);
        for (file, counter) in [
            ("trap.wat", trapped),
            ("loop.wat", timed_out),
            ("hog.wat", memory_cap),
        ] {
            let f = example(file);
            assert_eq!(call(&f, b"fine"), Ok(b"fine".to_vec()), "{file}");
            for round in 1..=2u64 {
                let started = Instant::now();
                let e = call(&f, b"!misbehave").unwrap_err();
                let took = started.elapsed();
                assert!(took < Duration::from_millis(50), "{file}: {took:?}");
                assert!(e.starts_with(f.name()) && !e.contains('\n'), "{file}: {e}");
                assert_eq!(counter(f.errors()), round, "{file}: {e}");
                assert_eq!(call(&f, b"again"), Ok(b"again".to_vec()), "{file}");
                assert_eq!(call(&reverse, b"abc"), Ok(b"cba".to_vec()), "{file}");
            }
            let e = f.errors();
            let all: u64 = [
                &e.trapped,
                &e.timed_out,
                &e.memory_cap,
                &e.refused,
                &e.bad_range,
                &e.instantiation,
            ]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
            assert_eq!(all, 2, "{file}: only its own reason counts");
        }
    }

    #[test]
    fn the_time_limit_stops_a_loop_no_sooner_than_its_timeout() {
        let _timing = TIMING.lock().unwrap_or_else(|e| e.into_inner());
        let f = example("loop.wat");
        let started = Instant::now();
        assert!(call(&f, b"!").unwrap_err().contains("ran longer than 10ms"));
        let took = started.elapsed();
        assert!(took >= TEST_LIMITS.timeout, "{took:?}");
    }

    /// A 200 us timeout is honoured at sub-millisecond granularity (the
    /// fine tick): never sooner, and typically well within a millisecond.
    #[test]
    fn a_sub_millisecond_timeout_is_kept() {
        let _timing = TIMING.lock().unwrap_or_else(|e| e.into_inner());
        let limits = WasmLimits::new(1 << 20, Duration::from_micros(200)).unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/functions/loop.wat");
        let f = WasmFunction::load(&path, limits).unwrap();
        let mut took: Vec<Duration> = (0..21)
            .map(|_| {
                let started = Instant::now();
                let e = call(&f, b"!").unwrap_err();
                assert!(e.contains("ran longer than 200"), "{e}");
                started.elapsed()
            })
            .collect();
        took.sort();
        eprintln!(
            "200us timeout: stopped after min {:?}, median {:?}, max {:?}",
            took[0], took[10], took[20]
        );
        assert!(took[0] >= limits.timeout, "{took:?}");
        assert!(
            took[10] < Duration::from_micros(900),
            "median {:?}",
            took[10]
        );
        assert_eq!(f.errors().timed_out.load(Ordering::Relaxed), 21);
    }

    /// A call that needs far less CPU than its timeout is never stopped
    /// because its worker was preempted for longer than the timeout; a loop
    /// on the same crowded CPU is still stopped, and counted.
    #[test]
    fn a_preempted_call_is_not_stopped_for_time_it_did_not_run() {
        let _timing = TIMING.lock().unwrap_or_else(|e| e.into_inner());
        // Some 25 us of work per request on this guest.
        let f = WasmFunction::new(
            "work",
            br#"(module (memory (export "memory") 1)
                (func (export "alloc") (param i32) (result i32) (i32.const 0))
                (func (export "handle") (param $p i32) (param $n i32) (result i64)
                  (local $i i32)
                  (if (i32.and (i32.ne (local.get $n) (i32.const 0))
                               (i32.eq (i32.load8_u (local.get $p)) (i32.const 33)))
                    (then (loop $forever (br $forever))))
                  (loop $work
                    (local.set $i (i32.add (local.get $i) (i32.const 1)))
                    (br_if $work (i32.lt_u (local.get $i) (i32.const 100000))))
                  (i64.const 0)))"#,
            WasmLimits::new(1 << 20, Duration::from_millis(1)).unwrap(),
        )
        .unwrap();
        let f = Arc::new(f);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // The engine's ticker thread was made above, unpinned: only the
        // threads below share one CPU.
        let cpu = peregrine_host::cpu::allowed_cpus().unwrap()[0];
        // Two busy threads share that CPU with the caller: the scheduler
        // takes the CPU from it for a slice (milliseconds) at a time.
        let hogs: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    peregrine_host::cpu::pin_to_cpu(cpu).unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let caller = {
            let f = f.clone();
            std::thread::spawn(move || {
                peregrine_host::cpu::pin_to_cpu(cpu).unwrap();
                let (mut calls, mut failed, mut preempted) = (0u32, Vec::new(), 0u32);
                let until = Instant::now() + Duration::from_secs(1);
                while Instant::now() < until {
                    let started = Instant::now();
                    if let Err(e) = call(&*f, b"work") {
                        failed.push(e);
                    }
                    preempted += u32::from(started.elapsed() > f.limits().timeout);
                    calls += 1;
                }
                let stopped = call(&*f, b"!loop").unwrap_err();
                (calls, failed, preempted, stopped)
            })
        };
        // The busy threads stop even when the caller failed.
        let caller = caller.join();
        stop.store(true, Ordering::Relaxed);
        for h in hogs {
            h.join().unwrap();
        }
        let (calls, failed, preempted, stopped) = caller.unwrap();
        eprintln!("{calls} calls on a crowded CPU, {preempted} took longer than the timeout");
        assert!(
            failed.is_empty(),
            "{} of {calls} failed: {failed:?}",
            failed.len()
        );
        assert!(
            preempted > 0,
            "no call of {calls} was preempted past its timeout"
        );
        assert!(stopped.contains("ran longer than 1ms"), "{stopped}");
        assert_eq!(f.errors().timed_out.load(Ordering::Relaxed), 1);
    }

    /// A call starved of CPU is stopped once its wall backstop has passed
    /// since its first tick, however little CPU it used; before that, it
    /// runs on.
    #[test]
    fn a_starved_call_is_stopped_by_the_wall_backstop() {
        assert_eq!(
            wall_backstop(Duration::from_millis(1)),
            Duration::from_millis(101)
        );
        assert_eq!(
            wall_backstop(Duration::from_secs(1)),
            Duration::from_secs(10)
        );
        let timeout = Duration::from_millis(1);
        let mut caps = Caps {
            max: 1 << 20,
            hit: false,
            timeout,
            first_tick: None,
        };
        // The first tick: the call goes on, its CPU time counted from now.
        assert!(matches!(caps.tick(), UpdateDeadline::Continue(_)));
        // No CPU used since, and the backstop not yet passed: on.
        let cpu = peregrine_host::cpu::thread_cpu();
        let since = Instant::now() - wall_backstop(timeout) / 2;
        caps.first_tick = Some((cpu, since));
        assert!(matches!(caps.tick(), UpdateDeadline::Continue(_)));
        // The backstop passed since the first tick: stopped.
        caps.first_tick = Some((cpu, Instant::now() - wall_backstop(timeout)));
        assert!(matches!(caps.tick(), UpdateDeadline::Interrupt));
    }

    #[test]
    fn limits_are_checked_in_one_line() {
        let ok = WasmLimits::new(16 << 20, Duration::from_micros(200)).unwrap();
        assert_eq!(ok.memory, 16 << 20);
        for (memory, timeout, why) in [
            (1000, Duration::from_millis(1), "expected 64KiB"),
            (5 << 30, Duration::from_millis(1), "expected 64KiB"),
            (1 << 20, Duration::from_micros(50), "tick is 100"),
            (1 << 20, Duration::from_secs(11), "..=10s"),
        ] {
            let e = WasmLimits::new(memory, timeout).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn each_thread_calls_its_own_instance() {
        let f = Arc::new(example("reverse.wat"));
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for n in 0..2000 {
                        let req = request(n % 1400 + t);
                        assert_eq!(call(&*f, &req), call(&Reverse, &req));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn guest_errors_and_bad_ranges_are_counted_and_keep_the_instance() {
        let f = WasmFunction::new(
            "picky",
            br#"(module (memory (export "memory") 1)
                (global $calls (mut i32) (i32.const 0))
                (func (export "alloc") (param i32) (result i32) (i32.const 0))
                (func (export "handle") (param $p i32) (param $n i32) (result i64)
                  (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
                  (if (i32.eqz (local.get $n)) (then (return (i64.const -7))))
                  (if (i32.eq (local.get $n) (i32.const 1))
                    (then (return (i64.const 0x0001000000000001))))
                  ;; The calls so far, as one byte at 0.
                  (i32.store8 (i32.const 0) (global.get $calls))
                  (i64.const 1)))"#,
            TEST_LIMITS,
        )
        .unwrap();
        assert!(call(&f, b"").unwrap_err().contains("returned error -7"));
        assert!(call(&f, b"x").unwrap_err().contains("outside its memory"));
        // The same instance answered all three: its count went on.
        assert_eq!(call(&f, b"xy"), Ok(vec![3]));
        assert_eq!(f.errors().refused.load(Ordering::Relaxed), 1);
        assert_eq!(f.errors().bad_range.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn bad_modules_are_refused_with_one_line() {
        let abi = r#"(memory (export "memory") 1)
            (func (export "alloc") (param i32) (result i32) (i32.const 0))"#;
        let handle = r#"(func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#;
        for (module, why) in [
            ("\0asm\x01\0\0\0\x7f".to_string(), "unexpected end-of-file"),
            ("(module (func".to_string(), "expected"),
            ("(module (func (result i32) (i64.const 0)))".to_string(), "type mismatch"),
            (format!("(module {abi})"), "\"handle\" must be"),
            (
                format!(r#"(module {abi} (func (export "handle") (param i32) (result i64) (i64.const 0)))"#),
                "\"handle\" must be",
            ),
            (format!("(module (func (export \"alloc\") (param i32) (result i32) (i32.const 0)) {handle})"), "no memory"),
            (
                format!(r#"(module (import "env" "now" (func)) {abi} {handle})"#),
                "imports env::now",
            ),
            (
                format!(r#"(module (memory (export "memory") 17) (func (export "alloc") (param i32) (result i32) (i32.const 0)) {handle})"#),
                "initial memory is above the cap",
            ),
            (
                format!("(module {abi} {handle} (func $s unreachable) (start $s))"),
                "unreachable",
            ),
        ] {
            let e = WasmFunction::new("bad", module.as_bytes(), TEST_LIMITS).err().unwrap();
            assert!(e.contains(why) && !e.contains('\n'), "{module}: {e}");
        }
        let missing = WasmFunction::load(Path::new("/nonexistent/f.wat"), TEST_LIMITS);
        assert!(missing.err().unwrap().starts_with("/nonexistent/f.wat: "));
    }
}
