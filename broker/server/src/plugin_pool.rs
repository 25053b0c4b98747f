//! Plugin work off the RPC threads and the async workers: the instances of one
//! attached plugin, each owned by a thread of its own (a *lane*).
//!
//! 1. An attachment (or a transform task) gets a [`PluginPool`] of up to
//!    `lanes_max` lanes. Lane 0 takes the instance started when the plugin
//!    was attached (its `init` validated the configuration); the other lanes
//!    start theirs, on their own thread, on first use.
//! 2. A call names a key (the partition). Calls with the same key go to the
//!    same lane and run in the order they were made; the lane's instance runs
//!    one batch at a time, so different partitions of a topic run in parallel
//!    on different lanes.
//! 3. The caller awaits the answer: no RPC thread or async worker ever runs
//!    plugin code, so a plugin that spins to its deadline delays only the
//!    traffic that goes through it.
//! 4. Each lane queues at most `calls_queued_max` calls; a call past that is
//!    refused at once (`PluginError::Unavailable`, the attachment's failure
//!    policy applies) rather than queued without bound.
//! 5. Lane threads run under the `SCHED_IDLE` policy, so plugin work yields
//!    the CPU to the broker's own threads at once on a busy machine. A
//!    plugin's budget counts its thread's CPU time (`plugin_host::budget`),
//!    so waiting for the CPU does not fail healthy plugins.
//!
//! Dropping the pool closes the lanes: each thread finishes what it queued,
//! drops its instance and exits.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use plugin_host::{CompiledPlugin, Plugin, PluginError, PluginLog, PluginMetrics};

use crate::partition::lock;

/// Bounds of one pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolLimits {
    /// Instances (and threads) one attachment may run at once.
    pub lanes_max: usize,
    /// Calls waiting per lane before new ones are refused.
    pub calls_queued_max: usize,
}

impl Default for PoolLimits {
    fn default() -> PoolLimits {
        PoolLimits { lanes_max: 2, calls_queued_max: 64 }
    }
}

/// A call as a lane runs it: its input (given back when the call cannot be
/// queued) and what to do with the lane's instance, or why it has none.
struct Job {
    input: Input,
    run: Box<dyn FnOnce(Instance<'_>, Input) + Send>,
}

/// A call's input, typed again by the call that made it.
type Input = Box<dyn Any + Send>;

/// The lane's instance for a call, or why it has none.
type Instance<'a> = Result<&'a mut Plugin, PluginError>;

/// What a lane needs to start an instance of its own.
struct Recipe {
    compiled: Arc<CompiledPlugin>,
    config: Vec<(String, String)>,
    log: Arc<PluginLog>,
    metrics: Arc<PluginMetrics>,
}

impl Recipe {
    fn start(&self) -> Result<Plugin, PluginError> {
        Plugin::start(self.compiled.clone(), self.config.clone(), self.log.clone(), self.metrics.clone())
    }
}

/// The call's outcome and its input, given back; `Err` only when the input is
/// lost (the lane's thread died running it).
pub type Called<T, I> = Result<(Result<T, PluginError>, I), PluginError>;

/// See the module docs.
pub struct PluginPool {
    recipe: Arc<Recipe>,
    limits: PoolLimits,
    /// One sender per lane, `None` until the lane's thread is started.
    lanes: Mutex<Vec<Option<SyncSender<Job>>>>,
    /// The instance `init`ed at attach, until lane 0 takes it.
    first: Mutex<Option<Plugin>>,
    /// How many records one call may be given (the size that last fit a
    /// call's budget; see `plugins::call_in_parts`), `usize::MAX` until a
    /// call ran out of it.
    records_per_call: AtomicUsize,
    /// Batches run in parts in a row with no part out of budget.
    batches_fit: AtomicUsize,
}

/// Batches in a row that must fit before calls may take twice as many
/// records: growing after every one made every other oversized batch waste a
/// call's budget finding the limit again.
const BATCHES_FIT_TO_GROW: usize = 8;

impl std::fmt::Debug for PluginPool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PluginPool").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl PluginPool {
    /// A pool around `first`, an instance already started (and `init`ed);
    /// further instances are started with its code and configuration when needed.
    pub fn new(first: Plugin, limits: PoolLimits) -> PluginPool {
        let recipe = Recipe {
            compiled: first.compiled().clone(),
            config: first.config().to_vec(),
            log: first.log().clone(),
            metrics: first.metrics().clone(),
        };
        let lanes_max = limits.lanes_max.max(1);
        PluginPool {
            recipe: Arc::new(recipe),
            limits: PoolLimits { lanes_max, calls_queued_max: limits.calls_queued_max.max(1) },
            lanes: Mutex::new(vec![None; lanes_max]),
            first: Mutex::new(Some(first)),
            records_per_call: AtomicUsize::new(usize::MAX),
            batches_fit: AtomicUsize::new(0),
        }
    }

    /// How many records one call may be given (see the field).
    pub fn records_per_call(&self) -> usize {
        self.records_per_call.load(Ordering::Relaxed)
    }

    pub fn set_records_per_call(&self, records: usize) {
        self.records_per_call.store(records.max(1), Ordering::Relaxed);
        self.batches_fit.store(0, Ordering::Relaxed);
    }

    /// Notes a batch run in parts of `size` records, none of them out of
    /// budget: after `BATCHES_FIT_TO_GROW` in a row, calls may take twice as
    /// many.
    pub fn note_batch_fit(&self, size: usize) {
        if self.batches_fit.fetch_add(1, Ordering::Relaxed) + 1 >= BATCHES_FIT_TO_GROW {
            self.set_records_per_call(size.saturating_mul(2));
        }
    }

    pub fn log(&self) -> &Arc<PluginLog> {
        &self.recipe.log
    }

    /// Runs `work` with `input` on the instance of `key`'s lane. Calls with the
    /// same key run in the order they were made. A call that cannot be queued
    /// (the lane is full) fails at once, and gives its input back.
    pub async fn call<I, T>(
        &self,
        key: u32,
        input: I,
        work: impl FnOnce(&mut Plugin, &mut I) -> Result<T, PluginError> + Send + 'static,
    ) -> Called<T, I>
    where
        I: Send + 'static,
        T: Send + 'static,
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let run = Box::new(move |plugin: Instance<'_>, input: Input| {
            let mut input = *input.downcast::<I>().expect("a job runs with its own input");
            let outcome = plugin.and_then(|plugin| work(plugin, &mut input));
            let _ = answer.send((outcome, input));
        });
        match self.submit(key, Job { input: Box::new(input), run }) {
            Ok(()) => answered.await.map_err(|_| PluginError::Unavailable("the plugin's thread stopped".to_owned())),
            Err((error, job)) => Ok((Err(error), *job.input.downcast::<I>().expect("the input of this call"))),
        }
    }

    fn submit(&self, key: u32, job: Job) -> Result<(), (PluginError, Job)> {
        let index = key as usize % self.limits.lanes_max;
        let mut lanes = lock(&self.lanes);
        let lane = match &lanes[index] {
            Some(lane) => lane.clone(),
            None => match self.start_lane(index) {
                Ok(lane) => lanes[index].insert(lane).clone(),
                Err(error) => return Err((error, job)),
            },
        };
        drop(lanes);
        lane.try_send(job).map_err(|error| match error {
            TrySendError::Full(job) => {
                let queued = self.limits.calls_queued_max;
                (PluginError::Unavailable(format!("the plugin is busy: {queued} calls already wait for it")), job)
            }
            TrySendError::Disconnected(job) => {
                (PluginError::Unavailable("the plugin's thread stopped".to_owned()), job)
            }
        })
    }

    fn start_lane(&self, index: usize) -> Result<SyncSender<Job>, PluginError> {
        let (sender, jobs) = mpsc::sync_channel::<Job>(self.limits.calls_queued_max);
        let mut instance = if index == 0 { lock(&self.first).take() } else { None };
        let recipe = self.recipe.clone();
        std::thread::Builder::new()
            .name(format!("weir-plugin-{index}"))
            .spawn(move || {
                lower_priority();
                for Job { input, run } in jobs {
                    let plugin = match &mut instance {
                        Some(plugin) => Ok(plugin),
                        None => recipe.start().map(|started| instance.insert(started)),
                    };
                    run(plugin, input);
                }
            })
            .map_err(|error| PluginError::Unavailable(format!("cannot start a plugin thread: {error}")))?;
        Ok(sender)
    }
}

/// Moves the calling thread to the `SCHED_IDLE` policy (best effort: a
/// refusal leaves it at the broker's priority). A broker thread that wakes
/// preempts an idle-policy thread at once — with a nice level instead, the
/// scheduler let a spinning plugin finish its slice first, which put ~2 ms on
/// the p99 of unrelated produces (`weir-bench isolation`). Idle-policy threads
/// still get the CPU the broker leaves free; one starved for longer than
/// `call_wall_deadline_ms` fails that call by its backstop.
fn lower_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    let status = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if status != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "plugin thread keeps the broker's priority");
    }
}
