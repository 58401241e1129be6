//! Snapshots of the engine in the database (ADR 0016).
//!
//! A snapshot is the engine's [`Image`] at one log position `seq`, stored as records: one per
//! agent in [`SNAPSHOT_AGENTS`], one per tenant in [`SNAPSHOT_TENANTS`], one per distinct spec
//! its agents refer to in [`SNAPSHOT_SPECS`] (format 6), all keyed by `seq`, and a manifest in
//! [`SNAPSHOTS`]. The agents are written [`SNAPSHOT_CHUNK_AGENTS`] to a transaction (with the
//! specs they are the first to have), so the writer's group commits go on between chunks (redb
//! has one writer at a time). Each chunk's transaction is durable on its own (ADR 0028): a
//! chunk left to the log's next checkpoint made that checkpoint sync every chunk written since
//! the last one, tens of megabytes, with redb's write lock held and the writer waiting. A
//! snapshot is current once its manifest commits; a power cut before that leaves the previous
//! one current, and whatever chunks of the new one reached the disk are removed by
//! [`Store::prune_snapshots`], like the previous snapshot's records once a newer one is current.

use std::sync::Arc;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::record::current::manifest::SnapshotManifest;
use super::record::{self, RecordError};
use super::{Store, StoreError};
use crate::engine::agent::AgentSpec;
use crate::engine::agent_state::AgentState;
use crate::engine::snapshot::Image;

/// seq -> the manifest of the snapshot at that log position. Holds one entry once pruned.
pub(super) const SNAPSHOTS: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshots");

/// (snapshot seq, tenant name) -> the tenant's record.
pub(super) const SNAPSHOT_TENANTS: TableDefinition<(u64, &str), &[u8]> =
    TableDefinition::new("snapshot_tenants");

/// (snapshot seq, agent id) -> the agent's whole state as a record.
pub(super) const SNAPSHOT_AGENTS: TableDefinition<(u64, u64), &[u8]> =
    TableDefinition::new("snapshot_agents");

/// (snapshot seq, spec number) -> a spec its agents' records refer to (format 6,
/// [`record::SnapshotSpecs`]), numbered from 0 in the order the agents first have them.
pub(super) const SNAPSHOT_SPECS: TableDefinition<(u64, u32), &[u8]> =
    TableDefinition::new("snapshot_specs");

/// Agents one snapshot transaction writes. A group commit waiting for redb's write lock waits
/// behind one chunk at most (the store's turns let it go before the next), and a chunk holds the
/// lock while it inserts and syncs its records (about 66 KB here for 100 agents that have run a
/// few times). Why 100, not 1,000 as it was: with durable chunks, 1,000 made the `timers`
/// benchmark's p99 19 ms, 250 made it 11 ms and 100 made it 6 ms (docs/benchmarks.md, "Timer
/// lateness"); a million agents take 10,000 transactions, each one sync.
pub const SNAPSHOT_CHUNK_AGENTS: usize = 100;

/// Stale snapshot records one pruning transaction deletes, at most (same reason). Why not
/// 5,000 as it was: at 100,000 agents a transaction of 5,000 deletions held the commits behind
/// it for tens of milliseconds after every snapshot (the `timers` benchmark's late fires).
pub const SNAPSHOT_PRUNE_BATCH: usize = 1_000;

/// What writing a snapshot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub seq: u64,
    pub agents: u64,
    pub bytes: u64,
}

impl Store {
    /// Creates the snapshot tables, so that readers never meet a missing one.
    pub(super) fn create_snapshot_tables(tx: &redb::WriteTransaction) -> Result<(), redb::Error> {
        tx.open_table(SNAPSHOTS)?;
        tx.open_table(SNAPSHOT_TENANTS)?;
        tx.open_table(SNAPSHOT_AGENTS)?;
        tx.open_table(SNAPSHOT_SPECS)?;
        Ok(())
    }

    /// Writes `image` as the current snapshot, then prunes the ones before it. Blocking, and
    /// long for a large fleet: call it on a blocking thread, never on an async worker.
    pub fn write_snapshot(&self, image: &Image) -> Result<Written, StoreError> {
        self.write_snapshot_in_chunks(image, SNAPSHOT_CHUNK_AGENTS)
    }

    /// [`Store::write_snapshot`] with `chunk_agents` agents per transaction (tests cut the
    /// power inside snapshots of many chunks without a thousand agents in each).
    pub fn write_snapshot_in_chunks(
        &self,
        image: &Image,
        chunk_agents: usize,
    ) -> Result<Written, StoreError> {
        let mut bytes = 0_u64;
        let mut specs = record::SnapshotSpecs::default();
        for chunk in image.agents.chunks(chunk_agents.max(1)) {
            // Encoded before the transaction: redb's write lock, which the log's appends wait
            // for, is held only for the inserts.
            let mut new_specs = Vec::new();
            let encoded: Vec<(u64, Vec<u8>)> = chunk
                .iter()
                .map(|state| {
                    let (record, new_spec) = specs.encode_agent(state);
                    new_specs.extend(new_spec);
                    (state.agent().id.0, record)
                })
                .collect();
            let tx = self.begin_background_write()?;
            {
                // A chunk's new specs go in its own transaction, before any record that refers
                // to them is current: the chunk's commit makes both durable at once.
                let mut table = tx.open_table(SNAPSHOT_SPECS).map_err(redb::Error::from)?;
                for (number, spec) in &new_specs {
                    bytes += spec.len() as u64;
                    table
                        .insert((image.seq, *number), spec.as_slice())
                        .map_err(redb::Error::from)?;
                }
                let mut table = tx.open_table(SNAPSHOT_AGENTS).map_err(redb::Error::from)?;
                for (agent, record) in &encoded {
                    bytes += record.len() as u64;
                    table
                        .insert((image.seq, *agent), record.as_slice())
                        .map_err(redb::Error::from)?;
                }
            }
            tx.commit().map_err(redb::Error::from)?;
        }
        tracing::debug!(seq = image.seq, bytes, "snapshot chunks written");
        let manifest = SnapshotManifest {
            seq: image.seq,
            next_agent: image.next_agent,
            next_wakeup: image.next_wakeup,
            next_run: image.next_run,
            tenants: image.tenants.len() as u64,
            agents: image.agents.len() as u64,
            specs: specs.len() as u64,
        };
        let tx = self.begin_background_write()?;
        {
            let mut tenants = tx.open_table(SNAPSHOT_TENANTS).map_err(redb::Error::from)?;
            for tenant in &image.tenants {
                let encoded = record::encode_tenant(tenant);
                bytes += encoded.len() as u64;
                tenants
                    .insert((image.seq, tenant.name.as_str()), encoded.as_slice())
                    .map_err(redb::Error::from)?;
            }
            let mut manifests = tx.open_table(SNAPSHOTS).map_err(redb::Error::from)?;
            manifests
                .insert(image.seq, manifest.encode().as_slice())
                .map_err(redb::Error::from)?;
            // Only the newest manifest stays: the records of the others are pruned next.
            manifests
                .retain(|seq, _| seq == image.seq)
                .map_err(redb::Error::from)?;
        }
        tx.commit().map_err(redb::Error::from)?;
        tracing::debug!(seq = image.seq, "snapshot manifest committed");
        while self.prune_snapshots()? {}
        Ok(Written {
            seq: image.seq,
            agents: image.agents.len() as u64,
            bytes,
        })
    }

    /// Deletes up to [`SNAPSHOT_PRUNE_BATCH`] records of snapshots that are not current (the
    /// previous snapshot, or the chunks of one a power cut interrupted); answers whether some
    /// may remain. Durable on its own (ADR 0028), so no later commit of the log's pays its sync;
    /// a crash before it commits leaves them, to be pruned again.
    pub fn prune_snapshots(&self) -> Result<bool, StoreError> {
        let current = self.current_snapshot_seq()?;
        let tx = self.begin_background_write()?;
        let mut budget = SNAPSHOT_PRUNE_BATCH;
        {
            // Stale records sort before the current snapshot's (older snapshots) or after them
            // (a newer one cut short): two ranges, never a walk through the current one.
            let (before, after) = match current {
                Some(seq) => (seq, seq.saturating_add(1)),
                None => (u64::MAX, u64::MAX),
            };
            budget -= prune_numbered(&tx, SNAPSHOT_AGENTS, (before, after), budget)?;
            budget -= prune_numbered(&tx, SNAPSHOT_SPECS, (before, after), budget)?;
            let mut tenants = tx.open_table(SNAPSHOT_TENANTS).map_err(redb::Error::from)?;
            let mut stale: Vec<(u64, String)> = Vec::new();
            for range in [
                tenants.range(..(before, "")).map_err(redb::Error::from)?,
                tenants.range((after, "")..).map_err(redb::Error::from)?,
            ] {
                for row in range.take(budget - stale.len()) {
                    let (key, _) = row.map_err(redb::Error::from)?;
                    let (seq, name) = key.value();
                    stale.push((seq, name.to_string()));
                }
            }
            budget -= stale.len();
            for (seq, name) in stale {
                tenants
                    .remove((seq, name.as_str()))
                    .map_err(redb::Error::from)?;
            }
        }
        tx.commit().map_err(redb::Error::from)?;
        Ok(budget == 0)
    }

    /// The log position of the current snapshot, if there is one.
    pub fn current_snapshot_seq(&self) -> Result<Option<u64>, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let manifests = tx.open_table(SNAPSHOTS).map_err(redb::Error::from)?;
        let last = manifests.last().map_err(redb::Error::from)?;
        Ok(last.map(|(seq, _)| seq.value()))
    }

    /// The current snapshot, read whole and checked against its manifest; `None` when the
    /// database holds none.
    pub fn read_snapshot(&self) -> Result<Option<Image>, StoreError> {
        let tx = self.db.begin_read().map_err(redb::Error::from)?;
        let manifests = tx.open_table(SNAPSHOTS).map_err(redb::Error::from)?;
        let Some((seq, bytes)) = manifests.last().map_err(redb::Error::from)? else {
            return Ok(None);
        };
        let seq = seq.value();
        let damaged = |reason: String| StoreError::Snapshot { seq, reason };
        let manifest = SnapshotManifest::decode(bytes.value())
            .map_err(|reason| damaged(format!("its manifest does not read: {reason}")))?;
        if manifest.seq != seq {
            return Err(damaged(format!(
                "its manifest is stored under {seq} but says {}",
                manifest.seq
            )));
        }
        // Only this format's builds write snapshots (a database of an older format holds none).
        let format = record::FORMAT_VERSION;
        let mut image = Image {
            seq,
            next_agent: manifest.next_agent,
            next_wakeup: manifest.next_wakeup,
            next_run: manifest.next_run,
            tenants: Vec::with_capacity(manifest.tenants as usize),
            agents: Vec::with_capacity(manifest.agents.min(1 << 20) as usize),
        };
        let tenants = tx.open_table(SNAPSHOT_TENANTS).map_err(redb::Error::from)?;
        for row in tenants.range((seq, "")..).map_err(redb::Error::from)? {
            let (key, bytes) = row.map_err(redb::Error::from)?;
            if key.value().0 != seq {
                break;
            }
            let tenant = record::decode_tenant(format, bytes.value())
                .map_err(|error| damaged(record_problem(&error)))?;
            image.tenants.push(tenant);
        }
        let specs = read_specs(&tx, seq, manifest.specs).map_err(damaged)?;
        let agents = tx.open_table(SNAPSHOT_AGENTS).map_err(redb::Error::from)?;
        let mut rows = agents
            .range((seq, 0)..=(seq, u64::MAX))
            .map_err(redb::Error::from)?;
        let mut bytes_hint = 0;
        let mut read_batch = || -> Result<RecordBatch, StoreError> {
            let mut batch = RecordBatch {
                rows: Vec::with_capacity(SNAPSHOT_DECODE_BATCH),
                bytes: Vec::with_capacity(bytes_hint),
            };
            for row in rows.by_ref().take(SNAPSHOT_DECODE_BATCH) {
                let (key, bytes) = row.map_err(redb::Error::from)?;
                let start = batch.bytes.len();
                batch.bytes.extend_from_slice(bytes.value());
                batch.rows.push((key.value().1, start..batch.bytes.len()));
            }
            bytes_hint = batch.bytes.len();
            Ok(batch)
        };
        for decoded in decode_while_reading(format, &specs, &mut read_batch)? {
            image.agents.push(decoded.map_err(damaged)?);
        }
        let counts = (image.tenants.len() as u64, image.agents.len() as u64);
        if counts != (manifest.tenants, manifest.agents) {
            return Err(damaged(format!(
                "it holds {} tenants and {} agents, its manifest says {} and {}",
                counts.0, counts.1, manifest.tenants, manifest.agents
            )));
        }
        Ok(Some(image))
    }
}

/// Deletes up to `budget` records of `table` (keyed by snapshot seq and a number) that sort
/// before `(before, 0)` or from `(after, 0)` on; answers how many it deleted.
fn prune_numbered<N>(
    tx: &redb::WriteTransaction,
    table: TableDefinition<(u64, N), &[u8]>,
    (before, after): (u64, u64),
    budget: usize,
) -> Result<usize, StoreError>
where
    N: redb::Key + Copy + Default + 'static + for<'a> redb::Value<SelfType<'a> = N>,
{
    let mut table = tx.open_table(table).map_err(redb::Error::from)?;
    let mut stale: Vec<(u64, N)> = Vec::new();
    for range in [
        table
            .range(..(before, N::default()))
            .map_err(redb::Error::from)?,
        table
            .range((after, N::default())..)
            .map_err(redb::Error::from)?,
    ] {
        for row in range.take(budget - stale.len()) {
            stale.push(row.map_err(redb::Error::from)?.0.value());
        }
    }
    for key in &stale {
        table.remove(*key).map_err(redb::Error::from)?;
    }
    Ok(stale.len())
}

/// Records one transaction of a backup's snapshot copy writes. Why not
/// [`SNAPSHOT_CHUNK_AGENTS`]: the copy is a database of its own that no commit of the log waits
/// for, so its chunk bounds only the memory a transaction holds, and fewer chunks mean fewer
/// syncs (a million agents in a thousand).
pub const BACKUP_COPY_CHUNK_RECORDS: usize = 1_000;

/// Copies the snapshot current in `from` (one read transaction's view) into `copy`, its specs
/// and agents [`BACKUP_COPY_CHUNK_RECORDS`] per transaction and its manifest last, so the copy holds it whole
/// or not at all (a backup of a compacted log needs it to recover).
pub(super) fn copy_current_snapshot(
    from: &redb::ReadTransaction,
    copy: &redb::Database,
) -> Result<(), StoreError> {
    let manifests = from.open_table(SNAPSHOTS).map_err(redb::Error::from)?;
    let Some((seq, manifest)) = manifests.last().map_err(redb::Error::from)? else {
        return Ok(());
    };
    let seq = seq.value();
    copy_numbered(from, copy, SNAPSHOT_SPECS, seq)?;
    copy_numbered(from, copy, SNAPSHOT_AGENTS, seq)?;
    let tx = copy.begin_write().map_err(redb::Error::from)?;
    {
        let tenants = from
            .open_table(SNAPSHOT_TENANTS)
            .map_err(redb::Error::from)?;
        let mut copied = tx.open_table(SNAPSHOT_TENANTS).map_err(redb::Error::from)?;
        for row in tenants.range((seq, "")..).map_err(redb::Error::from)? {
            let (key, bytes) = row.map_err(redb::Error::from)?;
            if key.value().0 != seq {
                break;
            }
            copied
                .insert(key.value(), bytes.value())
                .map_err(redb::Error::from)?;
        }
        tx.open_table(SNAPSHOTS)
            .map_err(redb::Error::from)?
            .insert(seq, manifest.value())
            .map_err(redb::Error::from)?;
    }
    tx.commit().map_err(redb::Error::from)?;
    Ok(())
}

/// Copies the records of `table` (keyed by snapshot seq and a number) of the snapshot at `seq`
/// from `from` into `copy`, [`BACKUP_COPY_CHUNK_RECORDS`] per transaction.
fn copy_numbered<N>(
    from: &redb::ReadTransaction,
    copy: &redb::Database,
    table: TableDefinition<(u64, N), &[u8]>,
    seq: u64,
) -> Result<(), StoreError>
where
    N: redb::Key + Copy + Default + Bounded + 'static + for<'a> redb::Value<SelfType<'a> = N>,
{
    let source = from.open_table(table).map_err(redb::Error::from)?;
    let mut rows = source
        .range((seq, N::default())..=(seq, N::MAX))
        .map_err(redb::Error::from)?
        .peekable();
    while rows.peek().is_some() {
        let tx = copy.begin_write().map_err(redb::Error::from)?;
        {
            let mut copied = tx.open_table(table).map_err(redb::Error::from)?;
            for row in rows.by_ref().take(BACKUP_COPY_CHUNK_RECORDS) {
                let (key, bytes) = row.map_err(redb::Error::from)?;
                copied
                    .insert(key.value(), bytes.value())
                    .map_err(redb::Error::from)?;
            }
        }
        tx.commit().map_err(redb::Error::from)?;
    }
    Ok(())
}

/// The largest number of a numbered snapshot table's key.
trait Bounded {
    const MAX: Self;
}

impl Bounded for u64 {
    const MAX: u64 = u64::MAX;
}

impl Bounded for u32 {
    const MAX: u32 = u32::MAX;
}

/// Agent records read from the database before they are decoded together (their memory bound).
pub const SNAPSHOT_DECODE_BATCH: usize = 16_384;

/// Agent records read together: each one's id and where its bytes lie in one buffer. Why one
/// buffer: a buffer per record was a million allocations at a million agents, each freed on
/// another thread than the one that made it.
struct RecordBatch {
    rows: Vec<(u64, std::ops::Range<usize>)>,
    bytes: Vec<u8>,
}

/// Every batch `read_batch` yields (until an empty one), decoded in order. Why overlapped:
/// reading a batch is single-threaded work in the database, so the next batch is read while
/// the last one decodes on the other cores, instead of leaving them idle meanwhile (one
/// thread under the simulator, whose world is a single thread).
fn decode_while_reading(
    format: u64,
    specs: &[Arc<AgentSpec>],
    read_batch: &mut dyn FnMut() -> Result<RecordBatch, StoreError>,
) -> Result<Vec<Result<Arc<AgentState>, String>>, StoreError> {
    let mut decoded = Vec::new();
    if crate::parallel::threads() <= 1 {
        loop {
            let batch = read_batch()?;
            if batch.rows.is_empty() {
                return Ok(decoded);
            }
            decoded.extend(decode_agents(format, specs, &batch));
        }
    }
    std::thread::scope(|scope| {
        let mut decoding: Option<std::thread::ScopedJoinHandle<'_, _>> = None;
        loop {
            let batch = read_batch()?;
            if let Some(done) = decoding.take() {
                decoded.extend(done.join().expect("decoding a record does not panic"));
            }
            if batch.rows.is_empty() {
                return Ok(decoded);
            }
            decoding = Some(scope.spawn(move || decode_agents(format, specs, &batch)));
        }
    })
}

/// The agents of `batch`, decoded in order, on every core there is (one thread under the
/// simulator, whose world is a single thread).
/// Each agent is put behind its `Arc` here, on the decoding thread: moved there later, a
/// kilobyte-sized state would be copied once more on the reading thread.
fn decode_agents(
    format: u64,
    specs: &[Arc<AgentSpec>],
    batch: &RecordBatch,
) -> Vec<Result<Arc<AgentState>, String>> {
    let decode = |decoder: &mut record::AgentDecoder, (id, at): &(u64, std::ops::Range<usize>)| {
        let state = decoder
            .decode(format, &batch.bytes[at.clone()])
            .map_err(|error| format!("agent {id}: {}", record_problem(&error)))?;
        if state.agent().id.0 != *id {
            return Err(format!(
                "agent {id}'s record says it is agent {}",
                state.agent().id
            ));
        }
        Ok(Arc::new(state))
    };
    // Why in parallel: decoding is most of a large fleet's recovery (several microseconds an
    // agent), and every record decodes alone.
    crate::parallel::map_chunks(&batch.rows, |part| {
        let mut decoder = record::AgentDecoder::new(specs);
        part.iter()
            .map(|row| decode(&mut decoder, row))
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

/// The spec table of the snapshot at `seq`, by number, checked whole: numbered from 0 without
/// a gap, as many as its manifest says (`expected`); or what is wrong with it.
fn read_specs(
    tx: &redb::ReadTransaction,
    seq: u64,
    expected: u64,
) -> Result<Vec<Arc<AgentSpec>>, String> {
    let storage = |error: redb::Error| format!("its spec table does not read: {error}");
    let table = tx
        .open_table(SNAPSHOT_SPECS)
        .map_err(|error| storage(error.into()))?;
    let mut specs = Vec::new();
    for row in table
        .range((seq, 0)..=(seq, u32::MAX))
        .map_err(|error| storage(error.into()))?
    {
        let (key, bytes) = row.map_err(|error| storage(error.into()))?;
        let number = key.value().1;
        if number as usize != specs.len() {
            return Err(format!(
                "its spec table holds spec {number} after {} specs",
                specs.len()
            ));
        }
        let spec = record::decode_spec(record::FORMAT_VERSION, bytes.value())
            .map_err(|error| format!("spec {number}: {}", record_problem(&error)))?;
        specs.push(Arc::new(spec));
    }
    if specs.len() as u64 != expected {
        return Err(format!(
            "its spec table holds {} specs, its manifest says {expected}",
            specs.len()
        ));
    }
    Ok(specs)
}

fn record_problem(error: &RecordError) -> String {
    match &error.event_type {
        Some(kind) => format!("{kind}: {}", error.reason),
        None => error.reason.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::agent::AgentSpec;
    use crate::engine::tenant::TokenHash;
    use crate::engine::Command;
    use crate::io::storage::StorageLocation;
    use crate::store::test_node::Node;

    fn fresh(name: &str) -> std::path::PathBuf {
        crate::store::test_node::fresh(&format!("snapshot-{name}"))
    }

    fn rows<K: redb::Key + 'static>(store: &Store, table: TableDefinition<K, &[u8]>) -> usize {
        let tx = store.db.begin_read().unwrap();
        let table = tx.open_table(table).unwrap();
        table.iter().unwrap().count()
    }

    /// Replaces event `seq`'s stored record with bytes no build can read.
    fn spoil_event(store: &Store, seq: u64) {
        let tx = store.db.begin_write().unwrap();
        tx.open_table(super::super::EVENTS)
            .unwrap()
            .insert(seq, b"not a record".as_slice())
            .unwrap();
        tx.commit().unwrap();
    }

    #[test]
    fn recovery_reads_the_snapshot_and_replays_only_the_events_after_it() {
        let path = fresh("tail");
        let mut node = Node::open(&path);
        node.fleet(2_500);
        let written = node.snapshot();
        assert_eq!(written.agents, 2_500);
        assert_eq!(written.seq, node.engine.last_seq());
        node.wake_all(10, 2_000);
        // An event before the snapshot that no longer reads: a replay of the whole log stops
        // there, recovery from the snapshot never reads it.
        spoil_event(&node.store, 2);
        let expected = node.engine.clone();
        drop(node);
        let store = Store::open(StorageLocation::File(path.clone())).unwrap();
        assert_eq!(store.recover().unwrap(), expected);
        assert!(matches!(
            store.recover_observed(None, &mut |_| {}),
            Err(StoreError::Corrupt { seq: 2, .. })
        ));
    }

    /// Fleets of one chunk and one agent more, of the snapshot's chunk and of a backup's copy:
    /// every agent is written, copied and recovered.
    #[test]
    fn a_snapshot_and_its_backup_copy_hold_every_agent_across_their_chunk_boundaries() {
        for agents in [
            SNAPSHOT_CHUNK_AGENTS,
            SNAPSHOT_CHUNK_AGENTS + 1,
            BACKUP_COPY_CHUNK_RECORDS,
            BACKUP_COPY_CHUNK_RECORDS + 1,
        ] {
            let path = fresh(&format!("chunks-{agents}"));
            let mut node = Node::open(&path);
            node.fleet(agents as u64);
            assert_eq!(node.snapshot().agents, agents as u64);
            assert_eq!(rows(&node.store, SNAPSHOT_AGENTS), agents);
            let backup = node.store.backup().unwrap();
            let copy = Store::open(StorageLocation::File(backup.path)).unwrap();
            assert_eq!(rows(&copy, SNAPSHOT_AGENTS), agents, "{agents} agents");
            assert_eq!(copy.recover().unwrap(), node.engine, "{agents} agents");
            assert_eq!(node.store.recover().unwrap(), node.engine);
        }
    }

    #[test]
    fn a_newer_snapshot_replaces_the_older_and_its_records_are_pruned() {
        let path = fresh("prune");
        let mut node = Node::open(&path);
        // More agents than one pruning transaction deletes: the older snapshot goes in two.
        const _: () = assert!(1_200 > SNAPSHOT_PRUNE_BATCH);
        node.fleet(1_200);
        node.snapshot();
        node.wake_all(1_200, 2_000);
        let second = node.snapshot();
        assert_eq!(node.store.current_snapshot_seq().unwrap(), Some(second.seq));
        assert_eq!(rows(&node.store, SNAPSHOTS), 1);
        assert_eq!(rows(&node.store, SNAPSHOT_AGENTS), 1_200);
        assert_eq!(rows(&node.store, SNAPSHOT_TENANTS), 1);
        assert_eq!(
            rows(&node.store, SNAPSHOT_SPECS),
            1,
            "one spec, every agent's"
        );
        assert_eq!(node.store.recover().unwrap(), node.engine);
    }

    #[test]
    fn a_snapshot_cut_short_before_its_manifest_is_never_read_and_is_pruned() {
        let path = fresh("cut");
        let mut node = Node::open(&path);
        node.fleet(1_500);
        let first = node.snapshot();
        node.wake_all(5, 3_000);
        // The chunks of a newer snapshot reach the disk; its manifest never does.
        let image = node.engine.image();
        let tx = node.store.db.begin_write().unwrap();
        {
            let mut specs = tx.open_table(SNAPSHOT_SPECS).unwrap();
            specs.insert((image.seq, 0), b"{}".as_slice()).unwrap();
            let mut table = tx.open_table(SNAPSHOT_AGENTS).unwrap();
            for state in &image.agents[..1_000] {
                let bytes = record::encode_agent(state);
                table
                    .insert((image.seq, state.agent().id.0), bytes.as_slice())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
        assert_eq!(node.store.current_snapshot_seq().unwrap(), Some(first.seq));
        assert_eq!(node.store.recover().unwrap(), node.engine);
        while node.store.prune_snapshots().unwrap() {}
        assert_eq!(
            rows(&node.store, SNAPSHOT_AGENTS),
            1_500,
            "only the current one's"
        );
        assert_eq!(
            rows(&node.store, SNAPSHOT_SPECS),
            1,
            "only the current one's"
        );
        assert_eq!(node.store.recover().unwrap(), node.engine);
    }

    /// Agents of one spec write it once; a second spec gets the next number. A spec table
    /// short of its manifest's count, or with a gap in its numbers, is refused by name.
    #[test]
    fn a_snapshot_stores_each_spec_once_and_a_damaged_spec_table_is_refused_by_name() {
        let path = fresh("specs");
        let mut node = Node::open(&path);
        node.fleet(3);
        node.run(
            Command::CreateAgent {
                tenant: "t".into(),
                spec: AgentSpec::with_interval("other", Some(90_000)),
                token_hash: TokenHash::of("other"),
            },
            2_000,
        );
        let written = node.snapshot();
        assert_eq!(rows(&node.store, SNAPSHOT_SPECS), 2);
        assert_eq!(node.store.recover().unwrap(), node.engine);
        let refused = |store: &Store| store.recover().unwrap_err().to_string();
        let prefix = format!("the snapshot at seq {} cannot be read: ", written.seq);

        let tx = node.store.db.begin_write().unwrap();
        let second = tx
            .open_table(SNAPSHOT_SPECS)
            .unwrap()
            .remove((written.seq, 1))
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        tx.commit().unwrap();
        assert_eq!(
            refused(&node.store),
            format!("{prefix}its spec table holds 1 specs, its manifest says 2")
        );

        let tx = node.store.db.begin_write().unwrap();
        tx.open_table(SNAPSHOT_SPECS)
            .unwrap()
            .insert((written.seq, 2), second.as_slice())
            .unwrap();
        tx.commit().unwrap();
        assert_eq!(
            refused(&node.store),
            format!("{prefix}its spec table holds spec 2 after 1 specs")
        );
    }

    #[test]
    fn a_snapshot_short_of_its_manifest_count_is_refused_by_name() {
        let path = fresh("short");
        let mut node = Node::open(&path);
        node.fleet(3);
        let written = node.snapshot();
        let tx = node.store.db.begin_write().unwrap();
        tx.open_table(SNAPSHOT_AGENTS)
            .unwrap()
            .remove((written.seq, 2))
            .unwrap();
        tx.commit().unwrap();
        let error = node.store.recover().unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "the snapshot at seq {} cannot be read: it holds 1 tenants and 2 agents, its \
                 manifest says 1 and 3",
                written.seq
            )
        );
    }
}
