//! The file store in a temporary directory: append, read and paging, finish, prune by age and by
//! bytes at their boundaries, permissions, redaction on disk, torn tails, runs of one agent
//! sharing its file, the old layout moved in.

use super::*;
use crate::transcript::{encode, EntryBody, TRUNCATION_NOTE_RESERVE_BYTES};

/// A fresh directory per test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("vigil-transcripts-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const A: AgentId = AgentId(3);

fn note(run: u64, seq: u64, at_ms: u64) -> TranscriptEntry {
    TranscriptEntry::note(RunId(run), seq, at_ms, format!("entry {seq}"))
}

fn notes(run: u64, count: u64, at_ms: u64) -> Vec<TranscriptEntry> {
    (0..count).map(|seq| note(run, seq, at_ms + seq)).collect()
}

fn seqs(page: &TranscriptPage) -> Vec<u64> {
    page.entries.iter().map(|e| e.seq).collect()
}

#[tokio::test]
async fn append_read_page_and_finish() {
    let dir = TempDir::new("page");
    let store = FileTranscripts::new(&dir.0);
    let none = Redactor::default();
    let empty = store.read(A, RunId(1), 0, 10).await.unwrap();
    assert_eq!((empty.total, empty.complete), (0, false));
    let all = notes(1, 5, 1_000);
    store.append(A, RunId(1), &all[..2], &none).await.unwrap();
    store.append(A, RunId(1), &all[2..], &none).await.unwrap();
    let first = store.read(A, RunId(1), 0, 2).await.unwrap();
    assert_eq!(seqs(&first), vec![0, 1]);
    assert_eq!(
        (first.next_offset, first.total, first.complete),
        (2, 5, false)
    );
    let rest = store.read(A, RunId(1), 2, 100).await.unwrap();
    assert_eq!(seqs(&rest), vec![2, 3, 4]);
    assert!(!rest.complete, "not finished yet");
    assert_eq!(rest.entries, all[2..].to_vec());
    store.finish(A, RunId(1)).await.unwrap();
    let done = store.read(A, RunId(1), 2, 100).await.unwrap();
    assert!(done.complete);
    let not_at_end = store.read(A, RunId(1), 0, 1).await.unwrap();
    assert!(
        !not_at_end.complete,
        "complete only on the page that reaches the end"
    );
    // Another agent's directory has no such run.
    let other = store.read(AgentId(4), RunId(1), 0, 10).await.unwrap();
    assert_eq!(other.total, 0);
    // Finishing a run that never wrote anything is fine.
    store.finish(A, RunId(99)).await.unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn files_are_0600_and_directories_0700() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("modes");
    let store = FileTranscripts::new(&dir.0);
    store
        .append(A, RunId(1), &notes(1, 1, 0), &Redactor::default())
        .await
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(store.root()), 0o700);
    assert_eq!(mode(&store.root().join("shard-03")), 0o700);
    assert_eq!(mode(&store.path(A)), 0o600);
    assert!(store.path(A).ends_with("transcripts/shard-03/3.ndjson"));
    assert!(store
        .path(AgentId(TRANSCRIPT_SHARDS + 0x1f))
        .ends_with("transcripts/shard-1f/287.ndjson"));
}

#[tokio::test]
async fn nothing_secret_reaches_the_disk() {
    let dir = TempDir::new("redact");
    let store = FileTranscripts::new(&dir.0);
    let redactor = Redactor::new(["sk-live-abcdef123"]);
    let entry = TranscriptEntry {
        run: RunId(1),
        seq: 0,
        at_ms: 0,
        body: EntryBody::ToolResult {
            id: "c1".into(),
            name: "curl".into(),
            output: "key=sk-live-abcdef123 Authorization: Bearer other-token-1".into(),
            is_error: false,
            latency_ms: 3,
        },
    };
    store
        .append(A, RunId(1), &[entry], &redactor)
        .await
        .unwrap();
    let text = std::fs::read_to_string(store.path(A)).unwrap();
    assert!(
        !text.contains("sk-live") && !text.contains("other-token"),
        "{text}"
    );
    assert_eq!(text.matches("[REDACTED]").count(), 2, "{text}");
}

/// A store whose transcripts expire `age_ms` after their first entry.
fn aged(dir: &TempDir, age_ms: u64) -> FileTranscripts {
    let retention = Retention {
        age_ms,
        ..Retention::default()
    };
    FileTranscripts::with_retention(&dir.0, retention)
}

/// Writes `count` notes of agent `A`'s run `run` from `at_ms` on, and finishes it if asked.
async fn write(store: &FileTranscripts, run: u64, count: u64, at_ms: u64, finished: bool) {
    let none = Redactor::default();
    store
        .append(A, RunId(run), &notes(run, count, at_ms), &none)
        .await
        .unwrap();
    if finished {
        store.finish(A, RunId(run)).await.unwrap();
    }
}

/// How many entries `run` of `agent` has on disk.
async fn total(store: &FileTranscripts, agent: AgentId, run: u64) -> u64 {
    store.read(agent, RunId(run), 0, 1).await.unwrap().total
}

#[tokio::test]
async fn a_torn_tail_is_not_read_and_damaged_lines_keep_their_place() {
    let dir = TempDir::new("torn");
    let store = FileTranscripts::new(&dir.0);
    let none = Redactor::default();
    store
        .append(A, RunId(1), &notes(1, 2, 0), &none)
        .await
        .unwrap();
    store.finish(A, RunId(1)).await.unwrap();
    let path = store.path(A);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"not json\n{\"run\":1,\"seq\":3,\"at_")
        .unwrap();
    let page = store.read(A, RunId(1), 0, 10).await.unwrap();
    assert_eq!(
        page.total, 3,
        "the damaged line is run 1's, the torn one is not read"
    );
    assert!(
        matches!(&page.entries[2].body, EntryBody::Note { text } if text.starts_with("unreadable"))
    );
    // The agent's next run starts on a line of its own: the torn one is ended first.
    let next = notes(2, 2, 10);
    store.append(A, RunId(2), &next, &none).await.unwrap();
    let page = store.read(A, RunId(2), 0, 10).await.unwrap();
    assert_eq!(page.entries, next);
    assert_eq!(
        total(&store, A, 1).await,
        4,
        "the torn line now reads, damaged, in run 1"
    );
}

#[tokio::test]
async fn runs_of_one_agent_share_its_file_and_read_apart() {
    let dir = TempDir::new("share");
    let store = FileTranscripts::new(&dir.0);
    let none = Redactor::default();
    let (first, second) = (notes(1, 3, 0), notes(2, 2, 100));
    store.append(A, RunId(1), &first, &none).await.unwrap();
    store.finish(A, RunId(1)).await.unwrap();
    store.append(A, RunId(2), &second, &none).await.unwrap();
    // Another agent of the same shard has its own file.
    let neighbour = AgentId(A.0 + TRANSCRIPT_SHARDS);
    store
        .append(neighbour, RunId(3), &notes(3, 1, 5), &none)
        .await
        .unwrap();
    assert_eq!(store.read(A, RunId(1), 0, 10).await.unwrap().entries, first);
    let page = store.read(A, RunId(2), 1, 10).await.unwrap();
    assert_eq!((page.entries.as_slice(), page.total), (&second[1..], 2));
    assert!(!page.complete, "run 2 is still open");
    assert_eq!(
        total(&store, neighbour, 1).await + total(&store, A, 3).await,
        0
    );
    assert_eq!(total(&store, neighbour, 3).await, 1);
}

#[tokio::test]
async fn a_run_from_an_earlier_process_reads_complete() {
    let dir = TempDir::new("earlier");
    let before = FileTranscripts::new(&dir.0);
    before
        .append(A, RunId(1), &notes(1, 2, 0), &Redactor::default())
        .await
        .unwrap();
    // Never finished: the process died. The next one finds the file and knows it is over.
    let after = FileTranscripts::new(&dir.0);
    let page = after.read(A, RunId(1), 0, 10).await.unwrap();
    assert_eq!((page.total, page.complete), (2, true));
}

#[tokio::test]
async fn a_run_past_its_byte_cap_ends_in_one_truncation_note() {
    let dir = TempDir::new("cap");
    let retention = Retention {
        run_bytes_max: TRUNCATION_NOTE_RESERVE_BYTES + 300,
        ..Retention::default()
    };
    let store = FileTranscripts::with_retention(&dir.0, retention);
    let entries = notes(1, 20, 0);
    let appended = store
        .append(A, RunId(1), &entries, &Redactor::default())
        .await
        .unwrap();
    assert!(appended.dropped > 0);
    let again = store
        .append(A, RunId(1), &notes(1, 1, 50), &Redactor::default())
        .await
        .unwrap();
    assert_eq!((again.written, again.dropped), (0, 1));
    let page = store.read(A, RunId(1), 0, 100).await.unwrap();
    let last = page.entries.last().unwrap();
    assert!(matches!(&last.body, EntryBody::Note { text } if text.starts_with("truncated")));
    assert_eq!(page.total as usize, appended.written);
    let bytes = std::fs::metadata(store.path(A)).unwrap().len();
    assert!(bytes <= retention.run_bytes_max, "{bytes}");
}

#[tokio::test]
async fn a_run_resumed_by_a_later_process_counts_what_it_wrote_before() {
    let dir = TempDir::new("resume");
    let none = Redactor::default();
    let line = encode(&note(2, 0, 0)).unwrap().len() as u64;
    // Room for exactly three lines of run 2 before the truncation note.
    let retention = Retention {
        run_bytes_max: TRUNCATION_NOTE_RESERVE_BYTES + 3 * line,
        ..Retention::default()
    };
    let before = FileTranscripts::with_retention(&dir.0, retention);
    before
        .append(A, RunId(1), &notes(1, 2, 0), &none)
        .await
        .unwrap();
    before
        .append(A, RunId(2), &notes(2, 2, 0), &none)
        .await
        .unwrap();
    // A later process resumes run 2 (the last run in the file) and then starts run 3.
    let after = FileTranscripts::with_retention(&dir.0, retention);
    let resumed = after
        .append(A, RunId(2), &[note(2, 2, 0), note(2, 3, 0)], &none)
        .await
        .unwrap();
    assert_eq!(
        (resumed.written, resumed.dropped),
        (2, 1),
        "one fits, then the note"
    );
    let fresh = after
        .append(A, RunId(3), &notes(3, 3, 0), &none)
        .await
        .unwrap();
    assert_eq!(
        (fresh.written, fresh.dropped),
        (3, 0),
        "run 3 starts at zero"
    );
    // An earlier run resumed after a later one is counted by a scan.
    let later = FileTranscripts::with_retention(&dir.0, retention);
    let again = later
        .append(A, RunId(1), &[note(1, 2, 0), note(1, 3, 0)], &none)
        .await
        .unwrap();
    assert_eq!((again.written, again.dropped), (2, 1));
    assert_eq!(total(&later, A, 2).await, 4);
}

#[tokio::test]
async fn prune_by_age_keeps_the_limit_and_removes_one_ms_more() {
    let dir = TempDir::new("age");
    let store = aged(&dir, 1_000);
    write(&store, 1, 3, 10_000, true).await;
    write(&store, 2, 1, 10_500, true).await;
    // Age counts from the first entry (10_000): exactly 1_000 ms old is kept.
    assert_eq!(store.prune(11_000).await.unwrap(), Pruned::default());
    let pruned = store.prune(11_001).await.unwrap();
    assert_eq!(pruned.runs, 1);
    assert_eq!(total(&store, A, 1).await, 0);
    assert_eq!(total(&store, A, 2).await, 1);
    // The last one goes too, and so does the agent's file.
    assert_eq!(store.prune(11_501).await.unwrap().runs, 1);
    assert!(!store.path(A).exists());
    // A fresh process (nothing open) finds the same ages on disk.
    write(&store, 3, 1, 20_000, false).await;
    let fresh = aged(&dir, 1_000);
    assert_eq!(fresh.prune(21_000).await.unwrap().runs, 0);
    assert_eq!(fresh.prune(21_001).await.unwrap().runs, 1);
}

#[tokio::test]
async fn a_prune_rewriting_the_file_keeps_the_open_run_writing_to_it() {
    let dir = TempDir::new("reopen");
    let store = aged(&dir, 1_000);
    let none = Redactor::default();
    write(&store, 1, 2, 0, true).await;
    write(&store, 2, 2, 900, false).await;
    assert_eq!(store.prune(1_500).await.unwrap().runs, 1);
    let rest: Vec<_> = (2..4).map(|seq| note(2, seq, 1_600)).collect();
    store.append(A, RunId(2), &rest, &none).await.unwrap();
    store.finish(A, RunId(2)).await.unwrap();
    let page = store.read(A, RunId(2), 0, 10).await.unwrap();
    assert_eq!((seqs(&page), page.complete), (vec![0, 1, 2, 3], true));
    assert_eq!(total(&store, A, 1).await, 0);
}

#[tokio::test]
async fn prune_by_bytes_removes_oldest_finished_runs_down_to_the_limit() {
    let dir = TempDir::new("bytes");
    let none = Redactor::default();
    // Measure one run's lines, then set the agent limit to exactly two of them.
    let probe = FileTranscripts::new(&dir.0);
    probe
        .append(AgentId(9), RunId(9), &notes(9, 2, 100), &none)
        .await
        .unwrap();
    let run_bytes = std::fs::metadata(probe.path(AgentId(9))).unwrap().len();
    std::fs::remove_dir_all(probe.root()).unwrap();
    let retention = Retention {
        agent_bytes_max: 2 * run_bytes,
        ..Retention::default()
    };
    let store = FileTranscripts::with_retention(&dir.0, retention);
    for run in [1, 2] {
        store
            .append(A, RunId(run), &notes(run, 2, 100), &none)
            .await
            .unwrap();
        store.finish(A, RunId(run)).await.unwrap();
    }
    // At the limit: nothing goes.
    assert_eq!(store.prune(200).await.unwrap().runs, 0);
    // One run more (still open) puts the agent over: the oldest finished run goes.
    store
        .append(A, RunId(3), &notes(3, 2, 150), &none)
        .await
        .unwrap();
    let pruned = store.prune(200).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            runs: 1,
            bytes: run_bytes
        }
    );
    assert_eq!(total(&store, A, 1).await, 0);
    assert_eq!(
        (total(&store, A, 2).await, total(&store, A, 3).await),
        (2, 2)
    );
    assert_eq!(
        std::fs::metadata(store.path(A)).unwrap().len(),
        2 * run_bytes
    );
    // Another agent's bytes are its own.
    store
        .append(AgentId(4), RunId(4), &notes(4, 2, 150), &none)
        .await
        .unwrap();
    assert_eq!(store.prune(200).await.unwrap().runs, 0);
}

#[tokio::test]
async fn names_that_are_not_transcripts_are_left_alone_and_staged_rewrites_removed() {
    let dir = TempDir::new("stray");
    let retention = Retention {
        age_ms: 1,
        ..Retention::default()
    };
    let store = FileTranscripts::with_retention(&dir.0, retention);
    std::fs::create_dir_all(store.root().join("notes")).unwrap();
    std::fs::create_dir_all(store.root().join("3")).unwrap();
    std::fs::write(store.root().join("3").join("README"), "x").unwrap();
    let shard = store.root().join("shard-03");
    std::fs::create_dir_all(&shard).unwrap();
    std::fs::write(shard.join("README"), "x").unwrap();
    // What a crash in the middle of a rewrite leaves.
    std::fs::write(shard.join("3.ndjson.tmp"), "{\"run\":1,").unwrap();
    assert_eq!(store.prune(u64::MAX).await.unwrap().runs, 0);
    assert!(store.root().join("3").join("README").exists());
    assert!(shard.join("README").exists());
    assert!(!shard.join("3.ndjson.tmp").exists());
}

#[tokio::test]
async fn the_old_layout_moves_into_the_agents_file_oldest_first() {
    let dir = TempDir::new("legacy");
    let store = FileTranscripts::new(&dir.0);
    let none = Redactor::default();
    // A run written in the current layout, then the old layout's files of two earlier runs.
    store
        .append(A, RunId(5), &notes(5, 1, 500), &none)
        .await
        .unwrap();
    let old = store.root().join("3");
    std::fs::create_dir_all(&old).unwrap();
    let text = |run, count| -> String {
        notes(run, count, 100 * run)
            .iter()
            .map(|e| encode(e).unwrap())
            .collect()
    };
    std::fs::write(old.join("1.ndjson"), text(1, 2)).unwrap();
    std::fs::write(old.join("2.ndjson"), text(2, 1) + "{\"run\":2,\"se").unwrap();
    assert_eq!(store.prune(1_000).await.unwrap(), Pruned::default());
    assert!(!old.exists(), "the old directory is gone");
    assert_eq!(
        (
            total(&store, A, 1).await,
            total(&store, A, 2).await,
            total(&store, A, 5).await
        ),
        (2, 1, 1)
    );
    let on_disk = std::fs::read_to_string(store.path(A)).unwrap();
    assert_eq!(on_disk, text(1, 2) + &text(2, 1) + &text(5, 1));
    // The open run 5 still appends to the file that replaced the old one.
    store
        .append(A, RunId(5), &[note(5, 1, 600)], &none)
        .await
        .unwrap();
    assert_eq!(total(&store, A, 5).await, 2);
}

#[tokio::test]
async fn an_abandoned_run_reads_complete_and_keeps_its_lines() {
    let dir = TempDir::new("abandon");
    let store = FileTranscripts::new(&dir.0);
    store
        .append(A, RunId(1), &notes(1, 2, 0), &Redactor::default())
        .await
        .unwrap();
    assert!(!store.read(A, RunId(1), 0, 10).await.unwrap().complete);
    store.abandon(A, RunId(1));
    // The store forgets the run on the blocking pool: wait for it, boundedly.
    let mut page = store.read(A, RunId(1), 0, 10).await.unwrap();
    for _ in 0..500 {
        if page.complete {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        page = store.read(A, RunId(1), 0, 10).await.unwrap();
    }
    assert_eq!((page.total, page.complete), (2, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_the_bound_of_operations_use_the_blocking_pool_at_once() {
    let dir = TempDir::new("bound");
    let store = FileTranscripts::new(&dir.0);
    // Many runs of many agents at once, each appending and syncing.
    let runs = (0..256u64).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let none = Redactor::default();
            let (agent, run) = (AgentId(i), RunId(i));
            store
                .append(agent, run, &notes(i, 3, 0), &none)
                .await
                .unwrap();
            store.finish(agent, run).await.unwrap();
        })
    });
    for run in runs.collect::<Vec<_>>() {
        run.await.unwrap();
    }
    let peak = store.in_flight_peak();
    let bound = io_threads_at_once(crate::parallel::cores());
    assert!(
        (1..=bound).contains(&peak),
        "{peak} operations at once, bound {bound}"
    );
    assert_eq!(total(&store, AgentId(255), 255).await, 3);
}

#[test]
fn operations_at_once_follow_the_cores_within_their_bounds() {
    let per_core = TRANSCRIPT_IO_THREADS_PER_CORE;
    let first_above_min = TRANSCRIPT_IO_THREADS_MIN / per_core + 1;
    let last_below_max = TRANSCRIPT_IO_THREADS_MAX / per_core;
    assert_eq!(io_threads_at_once(0), TRANSCRIPT_IO_THREADS_MIN);
    assert_eq!(io_threads_at_once(1), TRANSCRIPT_IO_THREADS_MIN);
    assert_eq!(
        io_threads_at_once(first_above_min - 1),
        TRANSCRIPT_IO_THREADS_MIN
    );
    assert_eq!(
        io_threads_at_once(first_above_min),
        first_above_min * per_core
    );
    assert_eq!(
        io_threads_at_once(last_below_max),
        TRANSCRIPT_IO_THREADS_MAX
    );
    assert_eq!(
        io_threads_at_once(last_below_max + 1),
        TRANSCRIPT_IO_THREADS_MAX
    );
    assert_eq!(io_threads_at_once(usize::MAX), TRANSCRIPT_IO_THREADS_MAX);
}

#[tokio::test]
async fn the_root_directory_is_synced_once_per_shard_not_once_per_new_file() {
    let dir = TempDir::new("root-syncs");
    let none = Redactor::default();
    let store = FileTranscripts::new(&dir.0);
    // Three agents of one shard and one of another, each with a first run (a new file).
    let same_shard = [A, AgentId(A.0 + 256), AgentId(A.0 + 512)];
    assert_eq!(TRANSCRIPT_SHARDS, 256);
    for agent in same_shard.into_iter().chain([AgentId(A.0 + 1)]) {
        store
            .append(agent, RunId(1), &notes(1, 1, 0), &none)
            .await
            .unwrap();
        store.finish(agent, RunId(1)).await.unwrap();
    }
    assert_eq!(store.root_syncs(), 2, "one per shard");
    // A later run of an agent appends to its file: nothing new in any directory.
    store
        .append(A, RunId(2), &notes(2, 1, 0), &none)
        .await
        .unwrap();
    store.finish(A, RunId(2)).await.unwrap();
    assert_eq!(store.root_syncs(), 2);
    // A new process syncs it again once: the process before may have died before its sync.
    let restarted = FileTranscripts::new(&dir.0);
    for agent in [AgentId(A.0 + 768), AgentId(A.0 + 1024)] {
        restarted
            .append(agent, RunId(1), &notes(1, 1, 0), &none)
            .await
            .unwrap();
        restarted.finish(agent, RunId(1)).await.unwrap();
    }
    assert_eq!(restarted.root_syncs(), 1);
}
