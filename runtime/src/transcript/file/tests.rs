//! The file store in a temporary directory: append, read and paging, finish, prune by age and by
//! bytes at their boundaries, permissions, redaction on disk, torn tails.

use super::*;
use crate::transcript::{EntryBody, TRUNCATION_NOTE_RESERVE_BYTES};

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
    assert_eq!(mode(&store.root().join("3")), 0o700);
    assert_eq!(mode(&store.path(A, RunId(1))), 0o600);
    assert!(store.path(A, RunId(1)).ends_with("transcripts/3/1.ndjson"));
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
    let text = std::fs::read_to_string(store.path(A, RunId(1))).unwrap();
    assert!(
        !text.contains("sk-live") && !text.contains("other-token"),
        "{text}"
    );
    assert_eq!(text.matches("[REDACTED]").count(), 2, "{text}");
}

#[tokio::test]
async fn a_torn_tail_is_not_read_and_damaged_lines_keep_their_place() {
    let dir = TempDir::new("torn");
    let store = FileTranscripts::new(&dir.0);
    store
        .append(A, RunId(1), &notes(1, 2, 0), &Redactor::default())
        .await
        .unwrap();
    let path = store.path(A, RunId(1));
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"not json\n{\"run\":1,\"seq\":3,\"at_")
        .unwrap();
    let page = store.read(A, RunId(1), 0, 10).await.unwrap();
    assert_eq!(page.total, 3);
    assert!(
        matches!(&page.entries[2].body, EntryBody::Note { text } if text.starts_with("unreadable"))
    );
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
    let bytes = std::fs::metadata(store.path(A, RunId(1))).unwrap().len();
    assert!(bytes <= retention.run_bytes_max, "{bytes}");
}

#[tokio::test]
async fn prune_by_age_keeps_the_limit_and_removes_one_ms_more() {
    let dir = TempDir::new("age");
    let retention = Retention {
        age_ms: 1_000,
        ..Retention::default()
    };
    let store = FileTranscripts::with_retention(&dir.0, retention);
    let none = Redactor::default();
    store
        .append(A, RunId(1), &notes(1, 3, 10_000), &none)
        .await
        .unwrap();
    store.finish(A, RunId(1)).await.unwrap();
    store
        .append(A, RunId(2), &notes(2, 1, 10_500), &none)
        .await
        .unwrap();
    store.finish(A, RunId(2)).await.unwrap();
    // Age counts from the first entry (10_000): exactly 1_000 ms old is kept.
    assert_eq!(store.prune(11_000).await.unwrap(), Pruned::default());
    let pruned = store.prune(11_001).await.unwrap();
    assert_eq!(pruned.runs, 1);
    assert!(!store.path(A, RunId(1)).exists());
    assert!(store.path(A, RunId(2)).exists());
    // The last one goes too, and so does the agent's empty directory.
    assert_eq!(store.prune(11_501).await.unwrap().runs, 1);
    assert!(!store.root().join("3").exists());
    // A fresh process (nothing open) finds the same ages on disk.
    store
        .append(A, RunId(3), &notes(3, 1, 20_000), &none)
        .await
        .unwrap();
    let fresh = FileTranscripts::with_retention(&dir.0, retention);
    assert_eq!(fresh.prune(21_000).await.unwrap().runs, 0);
    assert_eq!(fresh.prune(21_001).await.unwrap().runs, 1);
}

#[tokio::test]
async fn prune_by_bytes_removes_oldest_finished_runs_down_to_the_limit() {
    let dir = TempDir::new("bytes");
    let none = Redactor::default();
    // Measure one run's file, then set the agent limit to exactly two of them.
    let probe = FileTranscripts::new(&dir.0);
    probe
        .append(AgentId(9), RunId(9), &notes(9, 2, 100), &none)
        .await
        .unwrap();
    let run_bytes = std::fs::metadata(probe.path(AgentId(9), RunId(9)))
        .unwrap()
        .len();
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
    assert!(!store.path(A, RunId(1)).exists());
    assert!(store.path(A, RunId(2)).exists() && store.path(A, RunId(3)).exists());
    // Another agent's bytes are its own.
    store
        .append(AgentId(4), RunId(4), &notes(4, 2, 150), &none)
        .await
        .unwrap();
    assert_eq!(store.prune(200).await.unwrap().runs, 0);
}

#[tokio::test]
async fn names_that_are_not_transcripts_are_left_alone() {
    let dir = TempDir::new("stray");
    let retention = Retention {
        age_ms: 1,
        ..Retention::default()
    };
    let store = FileTranscripts::with_retention(&dir.0, retention);
    std::fs::create_dir_all(store.root().join("notes")).unwrap();
    std::fs::create_dir_all(store.root().join("3")).unwrap();
    std::fs::write(store.root().join("3").join("README"), "x").unwrap();
    assert_eq!(store.prune(u64::MAX).await.unwrap().runs, 0);
    assert!(store.root().join("3").join("README").exists());
}
