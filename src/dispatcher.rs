//! The APF controller: classify a request by the flow schemas, dispatch it
//! at its priority level, share the server's concurrency among levels and
//! lend it between them.
//!
//! The configuration in force is one immutable snapshot (config, compiled
//! classifier, levels) that requests read without a lock and a
//! reconfiguration swaps atomically. A level that stays across a
//! reconfiguration (same name and type) keeps its queueset, its waiting
//! requests and its demand statistics; a removed level lingers, held by the
//! requests still in it, until they are done.

use crate::adaptive::{AdaptiveConfigError, AdaptiveLimit, AdaptiveOptions, AdaptiveReport};
use crate::borrowing::{AdjusterOptions, BorrowingAdjuster, BorrowingConfigError, LevelConfig};
use crate::classification::{Classifier, RequestDigest};
use crate::clock::{Clock, Instant};
use crate::config::{
    Config, ConfigError, ConfigErrors, CostMode, LevelKind, LimitPolicy, ValidConfig,
    ValidPriorityLevel,
};
use crate::cost::{CostEstimator, CostKey};
use crate::level::{Learn, Lease, Leases, Level, Schema, WaitingNote};
use crate::queueset::QueueSetConfig;
use crate::stats::{tag_for_verb, ReadWriteHandle};
use crate::sync::{lock, thread_index, Arc, ArcCell, AtomicU64, Mutex, Ordering};
use crate::work_estimate::{level_max_seats, WorkEstimate};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

// The decision proper is the level's: a dispatcher passes on what the
// level decided, with where it classified the request (`Decision`).
pub use crate::level::Outcome;

/// Server-wide settings. `Default` gives 600 seats (Kubernetes' 400 + 200),
/// G = 3 ms, a 15 s wait limit, borrowing every 10 s, and no adaptive
/// limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatcherOptions {
    /// Seats shared by all levels (Kubernetes: max-requests-inflight +
    /// max-mutating-requests-inflight, 400 + 200 by default). With
    /// `adaptive`, the levels' per-request seat caps stay computed from it,
    /// while the total starts at the adaptive `min_limit` after a first
    /// probe and grows as latency allows.
    pub server_concurrency_limit: u32,
    /// G, the initial service-time guess of fair queuing.
    pub service_time_guess: Duration,
    /// The longest a request waits in a queue.
    pub wait_limit: Duration,
    /// How often borrowing recomputes the levels' CurrentCLs.
    pub borrowing_period: Duration,
    /// An adaptive server concurrency limit ([`crate::adaptive`]): the
    /// total follows the backend's measured latency, and borrowing shares
    /// it among the levels as it shares a fixed one. `None` (the default):
    /// `server_concurrency_limit` is fixed.
    pub adaptive: Option<AdaptiveOptions>,
}

impl Default for DispatcherOptions {
    fn default() -> Self {
        DispatcherOptions {
            server_concurrency_limit: 600,
            service_time_guess: Duration::from_millis(3),
            wait_limit: Duration::from_secs(15),
            borrowing_period: Duration::from_secs(10),
            adaptive: None,
        }
    }
}

/// Why a configuration was refused (the old one, if any, stays in force).
#[derive(Debug, Clone, PartialEq)]
pub enum DispatcherError {
    /// The configuration is invalid: every error, each naming its object and
    /// field.
    Config(ConfigErrors),
    /// The levels' borrowing settings are unusable (a lendable percent above
    /// 100, a duplicate level name, a too-short borrowing period).
    Borrowing(BorrowingConfigError),
    /// The adaptive limit's options are out of range.
    Adaptive(AdaptiveConfigError),
}

impl fmt::Display for DispatcherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DispatcherError::Config(e) => write!(f, "{e}"),
            DispatcherError::Borrowing(e) => write!(f, "{e}"),
            DispatcherError::Adaptive(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DispatcherError {}

impl From<ConfigErrors> for DispatcherError {
    fn from(e: ConfigErrors) -> Self {
        DispatcherError::Config(e)
    }
}

impl From<AdaptiveConfigError> for DispatcherError {
    fn from(e: AdaptiveConfigError) -> Self {
        DispatcherError::Adaptive(e)
    }
}

impl From<BorrowingConfigError> for DispatcherError {
    fn from(e: BorrowingConfigError) -> Self {
        DispatcherError::Borrowing(e)
    }
}

/// What happened to a request, and where it was classified: servers put the
/// schema's and level's UIDs in the `X-Kubernetes-PF-FlowSchema-UID` and
/// `X-Kubernetes-PF-PriorityLevel-UID` response headers.
#[derive(Debug)]
pub struct Decision {
    /// Execute now, wait, or rejected.
    pub outcome: Outcome,
    /// The flow schema the request matched (a [`Lease`]: holding it
    /// writes no reference count that other cores write).
    pub flow_schema: Lease<Schema>,
    /// The priority level it was sent to.
    pub priority_level: Lease<Level>,
    /// The flow's 64-bit hash (Kubernetes' `hashFlowID` of the schema name and
    /// flow distinguisher), which picks the request's hand of queues.
    pub flow_hash: u64,
}

struct Snapshot {
    config: ValidConfig,
    classifier: Classifier,
    levels: Vec<Arc<Level>>,
    schemas: Vec<Arc<Schema>>,
    /// Per level and per schema, in the same order, the references a
    /// request takes: one per shard, so that a request writes no
    /// reference count that every core writes (src/level/lease.rs).
    level_leases: Vec<Leases<Level>>,
    schema_leases: Vec<Leases<Schema>>,
}

/// The APF controller. See the module documentation.
pub struct Dispatcher {
    clock: Clock,
    options: DispatcherOptions,
    snapshot: ArcCell<Snapshot>,
    /// The adaptive total, if on. Declared before `adjuster`, so it stops
    /// (and lets go of the adjuster) first.
    adaptive: Option<AdaptiveLimit>,
    adjuster: BorrowingAdjuster,
    reconfiguring: Mutex<()>,
    /// Levels in the adjuster's order, for its callback.
    table: Arc<Mutex<Vec<Arc<Level>>>>,
    reconfigurations: AtomicU64,
    /// Flow-schema ids: a schema's id (its requests' tag in the levels'
    /// tallies) stays the same across reconfigurations while it is
    /// configured or its requests live; then it is reused.
    schema_ids: Mutex<SchemaIds>,
    /// Levels removed by a reconfiguration while requests were still in
    /// them (Kubernetes' quiescing levels), until they are idle.
    /// Kubernetes keeps them in borrowing (their shares in the share sum,
    /// their limit adjusted) until a configuration change finds them idle;
    /// so do we: these are the levels after the configured ones in the
    /// adjuster, with the borrowing config they had.
    retired: Mutex<Vec<(Arc<Level>, LevelConfig)>>,
    /// What requests of schemas that learn their cost really cost.
    costs: Arc<CostEstimator>,
    /// Rejections per level, behind `Retry-After` ([`crate::rejection`]).
    pub(crate) drops: crate::retry_after::DroppedRequests,
    /// Every level's requests waiting and executing, by kind, over time
    /// (`read_vs_write_current_requests`; see `stats::ReadWriteHandle`).
    pub(crate) read_write: ReadWriteHandle,
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("options", &self.options)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher with `config` (mandatory objects added if missing). A
    /// configuration with no objects at all is refused
    /// ([`ConfigError::no_objects`]); [`Config::mandatory`] is the explicit
    /// way to ask for only the mandatory ones.
    ///
    /// Fails with [`DispatcherError::Config`] listing every error of the
    /// configuration (each naming its object and field), or
    /// [`DispatcherError::Borrowing`] for unusable borrowing settings (such
    /// as a `borrowing_period` under the minimum).
    pub fn new(
        config: &Config,
        options: DispatcherOptions,
        clock: Clock,
    ) -> Result<Dispatcher, DispatcherError> {
        let valid = validate_nonempty(config)?;
        if let Some(adaptive) = &options.adaptive {
            adaptive.validate()?;
        }
        let borrowing = borrowing_levels(&valid);
        let table: Arc<Mutex<Vec<Arc<Level>>>> = Arc::new(Mutex::new(Vec::new()));
        let for_callback = table.clone();
        // The adaptive limit starts with a probe (`GradientController::new`).
        let first_total = options
            .adaptive
            .map_or(options.server_concurrency_limit, |a| a.probe_limit);
        let adjuster = BorrowingAdjuster::new(
            &clock,
            first_total,
            &borrowing,
            AdjusterOptions {
                period: options.borrowing_period,
            },
            move |cls| apply_limits(&lock(&for_callback), cls),
        )?;
        let for_refresh = table.clone();
        adjuster.set_demand_refresher(move || {
            // Cloned so no level is replayed with the table locked.
            let levels = lock(&for_refresh).clone();
            levels.iter().for_each(|level| level.catch_up());
        });
        let levels = build_levels(&valid, &[], &adjuster.current_cls(), &options, &clock);
        attach_demand(&adjuster, &levels);
        let read_write = ReadWriteHandle::new(clock.now());
        levels
            .iter()
            .for_each(|l| l.set_read_write_observer(Some(read_write.clone())));
        *lock(&table) = levels.clone();
        let mut schema_ids = SchemaIds::default();
        let snapshot = Snapshot::new(valid, levels, &mut schema_ids);
        let adaptive = options.adaptive.map(|a| {
            // A slow start: the total grows from the least one as latency
            // allows, never jumping to a total no latency vouched for.
            let initial = a.min_limit;
            let limit =
                AdaptiveLimit::start(&clock, a, initial, table.clone(), adjuster.total_setter());
            adjuster.set_server_cl(limit.limit());
            limit
        });
        Ok(Dispatcher {
            clock: clock.clone(),
            options,
            snapshot: ArcCell::new(Arc::new(snapshot)),
            adaptive,
            adjuster,
            reconfiguring: Mutex::new(()),
            table,
            reconfigurations: AtomicU64::new(0),
            schema_ids: Mutex::new(schema_ids),
            retired: Mutex::new(Vec::new()),
            costs: Arc::new(CostEstimator::default()),
            drops: crate::retry_after::DroppedRequests::new(clock.clone()),
            read_write,
        })
    }

    /// A dispatcher with Kubernetes' built-in configuration.
    pub fn builtin(options: DispatcherOptions, clock: Clock) -> Dispatcher {
        Dispatcher::new(&Config::builtin(), options, clock)
            .expect("the built-in configuration is valid")
    }

    /// The clock the dispatcher runs on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Classify a request and decide on it at its level. `deadline` is the
    /// caller's own deadline for starting (the wait limit applies too).
    pub fn start_request(
        &self,
        digest: &RequestDigest<'_>,
        estimate: WorkEstimate,
        deadline: Option<Instant>,
    ) -> Decision {
        // The snapshot is read without a shared write (`ReadMostly`: a
        // counter of the thread's shard), and the request's references
        // are its shard's leases.
        let (level, schema, flow_hash, distinguisher) = self.snapshot.with(|snap| {
            let c = snap.classifier.classify(digest);
            let thread = thread_index();
            (
                snap.level_leases[c.level_index].of_thread(thread).clone(),
                snap.schema_leases[c.schema_index].of_thread(thread).clone(),
                c.flow_hash,
                c.flow_distinguisher,
            )
        });
        // The levels tally the request by schema id (see `level`); the
        // top bit of the tag says whether it is read-only.
        let note = || WaitingNote::new(distinguisher, digest);
        let (estimate, learn) = self.learned(&schema, digest, estimate);
        let tag = tag_for_verb(schema.id, digest.verb);
        Level::admit_into(
            level.clone(),
            tag,
            flow_hash,
            estimate,
            deadline,
            note,
            learn,
            |outcome| Decision {
                outcome,
                flow_schema: schema,
                priority_level: level,
                flow_hash,
            },
        )
    }

    /// For a schema that learns its cost: the seats learned for the
    /// request's (schema, verb, resource), if any report came yet, instead
    /// of the static estimate's initial seats; and where its finish reports.
    fn learned(
        &self,
        schema: &Schema,
        digest: &RequestDigest<'_>,
        mut estimate: WorkEstimate,
    ) -> (WorkEstimate, Option<Learn>) {
        if schema.cost != CostMode::Learned {
            return (estimate, None);
        }
        let what = if digest.is_resource_request {
            digest.resource
        } else {
            digest.path
        };
        let key = CostKey::new(schema.id, digest.verb, digest.api_group, what);
        if let Some(seats) = self.costs.seats(key) {
            estimate.initial_seats = seats;
        }
        let costs = self.costs.clone();
        (estimate, Some(Learn { costs, key }))
    }

    /// The learned-cost table (schemas with `apf.libapf.io/cost: learned`).
    pub fn cost_estimator(&self) -> &CostEstimator {
        &self.costs
    }

    /// Switch to a new configuration: validated first and refused whole on
    /// error (the old one stays in force); otherwise levels are matched by
    /// name, borrowing adjusts at once, and the new snapshot is swapped in.
    pub fn reconfigure(&self, config: &Config) -> Result<(), DispatcherError> {
        let _one_at_a_time = lock(&self.reconfiguring);
        let valid = validate_nonempty(config)?;
        // Ids freed since the last reconfiguration go to this one's names.
        self.reclaim_schema_ids();
        let old = self.snapshot.load_full();
        let quiescing = self.quiescing_after(&old, &valid);
        let mut borrowing = borrowing_levels(&valid);
        borrowing.extend(quiescing.iter().map(|(_, c)| c.clone()));
        let mut built = None;
        let publish = |cls: &[u32]| {
            let levels = build_levels(&valid, &old.levels, cls, &self.options, &self.clock);
            // The quiescing levels' CurrentCLs follow the new ones'.
            let mut table = levels.clone();
            table.extend(quiescing.iter().map(|(l, _)| l.clone()));
            *lock(&self.table) = table.clone();
            built = Some((levels, table));
        };
        if self.adaptive.is_some() {
            // The total is the adaptive limit's, whatever it is now.
            self.adjuster
                .reconfigure_keeping_total(&borrowing, publish)?;
        } else {
            self.adjuster.reconfigure(
                self.options.server_concurrency_limit,
                &borrowing,
                publish,
            )?;
        }
        let (levels, table) = built.expect("publish runs on success");
        attach_demand(&self.adjuster, &table);
        // New levels report too; kept ones already do (same handle).
        table
            .iter()
            .for_each(|l| l.set_read_write_observer(Some(self.read_write.clone())));
        *lock(&self.retired) = quiescing;
        let snapshot = Snapshot::new(valid, levels, &mut lock(&self.schema_ids));
        let gone: Vec<Arc<Schema>> = old
            .schemas
            .iter()
            .filter(|s| !snapshot.schemas.iter().any(|n| n.name == s.name))
            .cloned()
            .collect();
        self.snapshot.store(Arc::new(snapshot));
        drop(old);
        lock(&self.schema_ids).removed.extend(gone);
        self.reclaim_schema_ids();
        self.reconfigurations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Free the ids of removed flow schemas whose requests are all gone,
    /// and drop what they left in the levels' tallies (so their metric
    /// series go too): without reuse, ids would only grow with every name
    /// ever configured, and past 65,535 share one tally. Runs at every
    /// reconfiguration; a schema still referenced (a request of it being
    /// admitted, or its `Decision` held) or with requests waiting or
    /// executing anywhere is kept for a later one.
    fn reclaim_schema_ids(&self) {
        let mut levels = self.levels();
        levels.extend(lock(&self.retired).iter().map(|(l, _)| l.clone()));
        // Level locks are taken under `schema_ids` (never the other way
        // round), so a schema revived meanwhile cannot lose its counts.
        let mut ids = lock(&self.schema_ids);
        let mut i = 0;
        while i < ids.removed.len() {
            let schema = &ids.removed[i];
            // No snapshot holds it any more: one count means no thread can
            // still tag a new request with it.
            let unreferenced = Arc::strong_count(schema) == 1;
            if unreferenced && !levels.iter().any(|l| l.tag_busy(schema.id)) {
                let schema = ids.removed.swap_remove(i);
                levels.iter().for_each(|l| l.forget_tag(schema.id));
                ids.release(schema.id);
            } else {
                i += 1;
            }
        }
    }

    /// Recompute the CurrentCLs now instead of at the end of the period.
    pub fn adjust_borrowing_now(&self) {
        self.adjuster.adjust_now();
    }

    /// The levels in force, in the configuration's order.
    pub fn levels(&self) -> Vec<Arc<Level>> {
        self.snapshot.with(|s| s.levels.clone())
    }

    /// The flow schemas in force, in matching order.
    pub fn flow_schemas(&self) -> Vec<Arc<Schema>> {
        self.snapshot.with(|s| s.schemas.clone())
    }

    /// The configuration in force (defaulted, mandatory objects added).
    pub fn config(&self) -> Config {
        self.snapshot.with(|s| s.config.config().clone())
    }

    /// The level of this name, if it is in force.
    pub fn level(&self, name: &str) -> Option<Arc<Level>> {
        self.snapshot
            .with(|s| s.levels.iter().find(|l| l.name == name).cloned())
    }

    /// Each level's current concurrency limit (exempt levels: none).
    pub fn current_limits(&self) -> Vec<(String, Option<u32>)> {
        self.levels()
            .iter()
            .map(|l| {
                (
                    l.name.clone(),
                    l.queueset().map(|qs| qs.stats().concurrency_limit),
                )
            })
            .collect()
    }

    /// The adaptive limit's state, when it is on
    /// ([`DispatcherOptions::adaptive`]).
    pub fn adaptive(&self) -> Option<AdaptiveReport> {
        self.adaptive.as_ref().map(AdaptiveLimit::report)
    }

    /// The seats shared by all levels now: `server_concurrency_limit`, or
    /// the adaptive limit's current total.
    pub fn server_concurrency_limit(&self) -> u32 {
        self.adjuster.server_cl()
    }

    /// The borrowing adjuster (its report has every level's demand
    /// statistics and bounds).
    pub fn borrowing(&self) -> &BorrowingAdjuster {
        &self.adjuster
    }

    /// The levels in force and, for each schema in force that reaches one,
    /// its (schema id, level index), from one snapshot (for metrics).
    #[cfg(not(loom))]
    pub(crate) fn routing(&self) -> (Vec<Arc<Level>>, Vec<(u32, usize)>) {
        self.snapshot.with(|s| {
            let routes = s
                .schemas
                .iter()
                .zip(s.config.flow_schemas())
                .filter_map(|(schema, fs)| fs.priority_level.map(|i| (schema.id, i)))
                .collect();
            (s.levels.clone(), routes)
        })
    }

    /// The name of the flow schema with this id (ids are the tags of
    /// [`Level::tag_stats`]), also for schemas no longer configured.
    pub fn schema_name(&self, id: u32) -> Option<String> {
        lock(&self.schema_ids).name(id).map(str::to_owned)
    }

    /// What validating the configuration in force noted: mandatory objects
    /// added, and flow schemas that name a missing priority level (kept,
    /// matching nothing, as Kubernetes keeps them). Each names its object.
    pub fn config_notices(&self) -> Vec<crate::config::Notice> {
        self.snapshot.with(|s| s.config.notices().to_vec())
    }

    /// Levels removed from the configuration that still hold requests
    /// (Kubernetes' quiescing levels).
    pub fn quiescing_levels(&self) -> Vec<Arc<Level>> {
        let retired = lock(&self.retired);
        retired
            .iter()
            .filter(|(l, _)| !l.is_idle())
            .map(|(l, _)| l.clone())
            .collect()
    }

    /// The levels that quiesce once `valid` replaces `old`: those of `old`
    /// that `valid` drops (a level stays when its name and exemptness do)
    /// and earlier quiescing ones, while they hold requests, each with the
    /// borrowing config it had. As in Kubernetes, an idle one is dropped at
    /// this configuration change. One whose name the new configuration (or
    /// a newer quiescing level) uses again drains outside borrowing, since
    /// borrowing tells levels apart by name.
    fn quiescing_after(
        &self,
        old: &Snapshot,
        valid: &ValidConfig,
    ) -> Vec<(Arc<Level>, LevelConfig)> {
        let stays = |l: &Level| {
            valid
                .priority_levels()
                .iter()
                .any(|pl| pl.name == l.name && pl.is_exempt() == l.is_exempt())
        };
        let removed_now = old
            .levels
            .iter()
            .zip(borrowing_levels(&old.config))
            .filter(|(l, _)| !stays(l))
            .map(|(l, c)| (l.clone(), c));
        let earlier = lock(&self.retired).clone();
        let mut out: Vec<(Arc<Level>, LevelConfig)> = Vec::new();
        for (level, config) in removed_now.chain(earlier) {
            let taken = valid
                .priority_levels()
                .iter()
                .any(|pl| pl.name == level.name)
                || out.iter().any(|(l, _)| l.name == level.name);
            if !level.is_idle() && !taken {
                out.push((level, config));
            }
        }
        out
    }
}

/// Flow-schema ids by name. A name keeps its id while it is configured
/// or its removed schema still has requests; then the id is free, and the
/// lowest free id goes to the next new name.
#[derive(Default)]
struct SchemaIds {
    /// Name by id; `None` when free.
    names: Vec<Option<String>>,
    ids: HashMap<String, u32>,
    free: BTreeSet<u32>,
    /// Schemas removed from the configuration whose ids are not free yet.
    removed: Vec<Arc<Schema>>,
}

impl SchemaIds {
    fn id_for(&mut self, name: &str) -> u32 {
        // A removed schema that comes back keeps its id (and counts).
        if let Some(i) = self.removed.iter().position(|s| s.name == name) {
            self.removed.swap_remove(i);
        }
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = match self.free.pop_first() {
            Some(id) => {
                self.names[id as usize] = Some(name.to_owned());
                id
            }
            None => {
                self.names.push(Some(name.to_owned()));
                (self.names.len() - 1) as u32
            }
        };
        self.ids.insert(name.to_owned(), id);
        id
    }

    fn release(&mut self, id: u32) {
        if let Some(name) = self.names.get_mut(id as usize).and_then(Option::take) {
            self.ids.remove(&name);
            self.free.insert(id);
        }
    }

    fn name(&self, id: u32) -> Option<&str> {
        self.names.get(id as usize)?.as_deref()
    }
}

impl Snapshot {
    /// `ids` holds the schema ids by name; new names get free ids.
    fn new(config: ValidConfig, levels: Vec<Arc<Level>>, ids: &mut SchemaIds) -> Snapshot {
        let classifier = Classifier::new(&config);
        let schemas: Vec<Arc<Schema>> = config
            .flow_schemas()
            .iter()
            .map(|fs| {
                Arc::new(Schema {
                    name: fs.name.clone(),
                    uid: fs.uid.clone(),
                    id: ids.id_for(&fs.name),
                    cost: fs.cost,
                })
            })
            .collect();
        let level_leases = levels.iter().map(Leases::new).collect();
        let schema_leases = schemas.iter().map(Leases::new).collect();
        Snapshot {
            config,
            classifier,
            levels,
            schemas,
            level_leases,
            schema_leases,
        }
    }
}

/// Validation, refusing a configuration with no objects: applied, it would
/// silently drop every suggested level and send everybody to `catch-all`.
fn validate_nonempty(config: &Config) -> Result<ValidConfig, ConfigErrors> {
    if config.is_empty() {
        return Err(ConfigErrors(vec![ConfigError::no_objects()]));
    }
    config.validate()
}

fn borrowing_levels(valid: &ValidConfig) -> Vec<LevelConfig> {
    valid
        .priority_levels()
        .iter()
        .map(|pl| match &pl.kind {
            LevelKind::Exempt => LevelConfig::exempt(pl.name.clone())
                .with_nominal_shares(pl.nominal_concurrency_shares)
                .with_lendable_percent(pl.lendable_percent),
            LevelKind::Limited {
                borrowing_limit_percent,
                ..
            } => LevelConfig::limited(pl.name.clone(), pl.nominal_concurrency_shares)
                .with_lendable_percent(pl.lendable_percent)
                .with_borrowing_limit_percent(*borrowing_limit_percent),
        })
        .collect()
}

fn queueset_config(
    pl: &ValidPriorityLevel,
    limit: u32,
    options: &DispatcherOptions,
) -> QueueSetConfig {
    let (queues, hand_size, queue_length_limit) = match &pl.kind {
        LevelKind::Limited {
            limit_response: LimitPolicy::Queue(q),
            ..
        } => (q.queues, q.hand_size, q.queue_length_limit),
        _ => (0, 1, 1),
    };
    QueueSetConfig {
        name: pl.name.clone(),
        concurrency_limit: limit,
        queues,
        hand_size,
        queue_length_limit,
        service_time_guess: options.service_time_guess,
        wait_limit: options.wait_limit,
        fairness: pl.fairness,
    }
}

/// The levels of `valid`, reusing those of `old` that keep their name and
/// type; `limits` are the CurrentCLs in the same order.
fn build_levels(
    valid: &ValidConfig,
    old: &[Arc<Level>],
    limits: &[u32],
    options: &DispatcherOptions,
    clock: &Clock,
) -> Vec<Arc<Level>> {
    let nominal =
        crate::borrowing::level_limits(options.server_concurrency_limit, &borrowing_levels(valid));
    valid
        .priority_levels()
        .iter()
        .enumerate()
        .map(|(i, pl)| {
            let limit = limits.get(i).copied().unwrap_or(0);
            // A level that failed (a panic inside its critical section, see
            // `queueset`) is not kept: a new one replaces it, and the failed
            // one drains like a removed level.
            let kept = old
                .iter()
                .find(|l| {
                    l.name == pl.name
                        && l.is_exempt() == pl.is_exempt()
                        && !l.queueset().is_some_and(|qs| qs.failed())
                })
                .cloned();
            let level = match (pl.is_exempt(), kept) {
                (_, Some(level)) => {
                    if let Some(qs) = level.queueset() {
                        // Validation already checked what the queueset checks.
                        let _ = qs.reconfigure(queueset_config(pl, limit, options));
                    }
                    level
                }
                (true, None) => Arc::new(Level::exempt(
                    pl.name.clone(),
                    pl.uid.clone(),
                    clock.clone(),
                )),
                (false, None) => {
                    let qs = crate::queueset::QueueSet::new(
                        queueset_config(pl, limit, options),
                        clock.clone(),
                    )
                    .expect("validated configuration makes a valid queueset");
                    Arc::new(Level::limited(
                        pl.name.clone(),
                        pl.uid.clone(),
                        qs,
                        clock.clone(),
                    ))
                }
            };
            // Kubernetes tracks a per-request seat cap only for levels that
            // queue; elsewhere only the work estimator's own maximum applies.
            let nominal_cl = nominal.get(i).map_or(limit, |l| l.nominal_cl);
            let max_seats = match &pl.kind {
                LevelKind::Limited {
                    limit_response: LimitPolicy::Queue(q),
                    ..
                } => level_max_seats(nominal_cl, q.hand_size) as u64,
                // Exempt: what the estimator gives at most (see
                // EXEMPT_MAX_SEATS), so no one request claims more.
                _ if pl.is_exempt() => u64::from(crate::work_estimate::EXEMPT_MAX_SEATS),
                _ => u64::MAX,
            };
            level.max_seats.store(max_seats, Ordering::Relaxed);
            level
        })
        .collect()
}

fn attach_demand(adjuster: &BorrowingAdjuster, levels: &[Arc<Level>]) {
    for (i, level) in levels.iter().enumerate() {
        level.set_demand_observer(adjuster.seat_demand(i));
    }
}

/// Borrowing's callback: give each limited level its new CurrentCL.
fn apply_limits(levels: &[Arc<Level>], cls: &[u32]) {
    for (level, &cl) in levels.iter().zip(cls) {
        if let Some(qs) = level.queueset() {
            // Only the limit changes; the rest of the config was valid.
            let _ = qs.set_concurrency_limit(cl.min(crate::queueset::MAX_CONCURRENCY_LIMIT));
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
