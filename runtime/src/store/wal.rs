//! The event log's write-ahead file (ADR 0026): what makes an append durable.
//!
//! An append writes its events as one checksummed frame at the end of this file and syncs it;
//! the events then go into redb in a commit that does not sync. Every
//! [`WAL_CHECKPOINT_APPENDS`] appends (or [`WAL_CHECKPOINT_BYTES`] of frames) one durable redb
//! commit makes everything before it durable in the database, and the file starts again: its
//! header gets the next generation, and the frames after it, which were checksummed under the
//! generation before, no longer read as frames. Opening the store replays the frames the
//! database does not hold yet.
//!
//! Why: a durable redb commit copies and checksums every page on the path to the new event and
//! records the pages it freed, about 200,000 instructions and ten 4-KiB page writes; a frame is
//! one sequential write of the event's own bytes. Measured in ADR 0026.
//!
//! Why a generation rather than cutting the file back: a file that keeps its length overwrites
//! blocks it already has, so a frame's `fdatasync` writes data only. Cutting it back and growing
//! it again made the file system allocate blocks, and commit its journal, inside appends' syncs
//! (measured in ADR 0026's "Generations").
//!
//! Layout: a 16-byte header (`VIGILWAL`, the format as a little-endian u32, the generation as a
//! little-endian u32), then frames. A frame is `len: u32`, `crc: u32` (CRC-32 of the
//! generation's bytes, the length's bytes and the payload; format 1 had no generation and left
//! it out), then `len` bytes of payload: `first_seq: u64`, `count: u32`, and `count` times
//! `record_len: u32` followed by the record as [`super::record::encode`] wrote it. All integers
//! are little-endian. A frame is a whole append (one group commit): a batch is durable whole or
//! not at all, as a redb commit is.

use std::io;

/// The file's first bytes.
const MAGIC: &[u8; 8] = b"VIGILWAL";
/// The layout this build writes. It also reads format 1 (no generation; its file was cut back
/// to the header at each checkpoint, so it never held stale frames).
pub const WAL_FORMAT: u32 = 2;
/// The first format with a generation in the header and in every frame's checksum.
const FIRST_FORMAT_WITH_GENERATION: u32 = 2;
/// Bytes before the first frame.
pub const WAL_HEADER_BYTES: u64 = 16;
/// Bytes of a frame before its payload: the length and the checksum.
const FRAME_HEAD_BYTES: usize = 8;
/// Bytes of a payload before its records: the first seq and the count.
const PAYLOAD_HEAD_BYTES: usize = 12;
/// Appends between two durable redb commits (checkpoints). Bounds what an open replays and the
/// memory redb holds for commits not yet written durably.
pub const WAL_CHECKPOINT_APPENDS: u32 = 128;
/// Frame bytes after which the next append checkpoints, however few appends wrote them: keeps
/// the file, and the replay at open, small when events are large.
pub const WAL_CHECKPOINT_BYTES: u64 = 4 * 1024 * 1024;

/// Whether the append that brought the count since the last checkpoint to `appends` and the
/// file's frames to `frame_bytes` checkpoints.
pub fn checkpoint_due(appends: u32, frame_bytes: u64) -> bool {
    appends >= WAL_CHECKPOINT_APPENDS || frame_bytes >= WAL_CHECKPOINT_BYTES
}

/// How much the file grows when a frame does not fit. Why grow ahead, not per frame: an
/// append's sync then changes no file size. The growth is written as zeroes, not made with
/// `ftruncate`, so the file system allocates its blocks once, in the append that grows it, and
/// not in every later sync that first touches a hole. Zeroes after the last frame read as the
/// end of the log.
pub const WAL_GROW_BYTES: u64 = 256 * 1024;
/// The length a checkpoint cuts a longer file back to. One group commit may hold a bulk load's
/// events (a fleet file applied at start), and the file keeps its length between checkpoints;
/// this bounds what it keeps, and what an open reads, to one checkpoint's frames and a step.
pub const WAL_KEEP_BYTES: u64 = WAL_HEADER_BYTES + WAL_CHECKPOINT_BYTES + WAL_GROW_BYTES;

/// Why the file cannot be used. A torn last frame is not one: it was never acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("write-ahead log I/O: {0}")]
    Io(#[from] io::Error),
    #[error("the write-ahead log does not start with Vigil's header; the file was not changed")]
    NotAWal,
    #[error(
        "the write-ahead log is in format {found}, written by a newer Vigil; this build reads \
         format {WAL_FORMAT}; the file was not changed"
    )]
    NewerFormat { found: u32 },
}

/// One append as the file holds it: the events' stored records, from `first_seq` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub first_seq: u64,
    pub records: Vec<Vec<u8>>,
}

impl Frame {
    /// The seq of the frame's last event (`first_seq - 1` for an empty frame).
    pub fn last_seq(&self) -> u64 {
        self.first_seq + self.records.len() as u64 - 1
    }
}

/// The write-ahead file over any redb storage backend (a file, or the simulator's disk).
pub struct Wal {
    file: Box<dyn redb::StorageBackend>,
    /// Where the next frame goes: the end of the last whole frame.
    end: u64,
    /// The file's length: frames, then zeroes, a torn frame's remains, or the frames of earlier
    /// generations, up to it.
    len: u64,
    /// The generation the header holds and the frames after it are checksummed under; `None`
    /// in a format-1 file until its first checkpoint.
    generation: Option<u32>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("end", &self.end)
            .field("len", &self.len)
            .field("generation", &self.generation)
            .finish()
    }
}

impl Wal {
    /// Opens the file and reads its whole frames of the header's generation, in order. A file
    /// shorter than the header is new (or its header's first write was torn) and gets one; a
    /// torn last frame is dropped (the next append overwrites it). Blocking.
    pub fn open(file: Box<dyn redb::StorageBackend>) -> Result<(Wal, Vec<Frame>), WalError> {
        let len = file.len()?;
        if len < WAL_HEADER_BYTES {
            file.set_len(WAL_HEADER_BYTES)?;
            file.write(0, &header(0))?;
            file.sync_data()?;
            let wal = Wal {
                file,
                end: WAL_HEADER_BYTES,
                len: WAL_HEADER_BYTES,
                generation: Some(0),
            };
            return Ok((wal, Vec::new()));
        }
        let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        file.read(0, &mut bytes)?;
        let generation = check_header(&bytes)?;
        let (frames, end) = read_frames(&bytes, generation);
        let wal = Wal {
            file,
            end,
            len,
            generation,
        };
        Ok((wal, frames))
    }

    /// Bytes of frames in the file.
    pub fn frame_bytes(&self) -> u64 {
        self.end - WAL_HEADER_BYTES
    }

    /// Writes `records` (from `first_seq` on) as one frame and syncs it: when this returns Ok,
    /// the append is durable. Blocking.
    pub fn append(&mut self, first_seq: u64, records: &[Vec<u8>]) -> Result<(), WalError> {
        let frame = encode_frame(self.generation, first_seq, records);
        let need = self.end + frame.len() as u64;
        let grown = (need > self.len).then(|| need.max(self.len + WAL_GROW_BYTES));
        if let Some(grown) = grown {
            self.file.set_len(grown)?;
            self.len = grown;
        }
        self.file.write(self.end, &frame)?;
        if let Some(grown) = grown.filter(|&grown| grown > need) {
            // Written, not left a hole: the blocks are allocated here, once.
            let zeroes = vec![0u8; usize::try_from(grown - need).map_err(io::Error::other)?];
            self.file.write(need, &zeroes)?;
        }
        self.file.sync_data()?;
        self.end = need;
        Ok(())
    }

    /// Starts the file again, durably: the header gets the next generation, so the frames in
    /// the file no longer read as frames, and a file grown past [`WAL_KEEP_BYTES`] is cut back
    /// to it. Call once the database holds every frame durably. Blocking.
    pub fn reset(&mut self) -> Result<(), WalError> {
        if self.len > WAL_KEEP_BYTES {
            self.file.set_len(WAL_KEEP_BYTES)?;
            self.len = WAL_KEEP_BYTES;
        }
        let next = self.generation.map_or(0, |g| g.wrapping_add(1));
        self.file.write(0, &header(next))?;
        self.file.sync_data()?;
        self.generation = Some(next);
        self.end = WAL_HEADER_BYTES;
        Ok(())
    }
}

/// The whole frames a write-ahead file's bytes hold, as an open reads them (for tests and
/// tools that look at a file without opening the store).
pub fn frames_in(bytes: &[u8]) -> Result<Vec<Frame>, WalError> {
    if (bytes.len() as u64) < WAL_HEADER_BYTES {
        return Ok(Vec::new());
    }
    let generation = check_header(bytes)?;
    Ok(read_frames(bytes, generation).0)
}

fn header(generation: u32) -> [u8; WAL_HEADER_BYTES as usize] {
    let mut header = [0u8; WAL_HEADER_BYTES as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&WAL_FORMAT.to_le_bytes());
    header[12..16].copy_from_slice(&generation.to_le_bytes());
    header
}

/// Checks the header; returns its generation (`None` for format 1, which has none).
fn check_header(bytes: &[u8]) -> Result<Option<u32>, WalError> {
    if &bytes[..8] != MAGIC {
        return Err(WalError::NotAWal);
    }
    let found = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if found > WAL_FORMAT {
        return Err(WalError::NewerFormat { found });
    }
    let generation = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    Ok((found >= FIRST_FORMAT_WITH_GENERATION).then_some(generation))
}

fn encode_frame(generation: Option<u32>, first_seq: u64, records: &[Vec<u8>]) -> Vec<u8> {
    let payload_len = PAYLOAD_HEAD_BYTES + records.iter().map(|r| 4 + r.len()).sum::<usize>();
    let mut frame = Vec::with_capacity(FRAME_HEAD_BYTES + payload_len);
    let len = u32::try_from(payload_len).expect("a group commit's events fit in 4 GiB");
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&first_seq.to_le_bytes());
    let count = u32::try_from(records.len()).expect("a group commit holds under 2^32 events");
    frame.extend_from_slice(&count.to_le_bytes());
    for record in records {
        let record_len = u32::try_from(record.len()).expect("an event's record fits in 4 GiB");
        frame.extend_from_slice(&record_len.to_le_bytes());
        frame.extend_from_slice(record);
    }
    let crc = checksum(generation, &frame[..4], &frame[FRAME_HEAD_BYTES..]);
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
    frame
}

fn checksum(generation: Option<u32>, len: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    if let Some(generation) = generation {
        hasher.update(&generation.to_le_bytes());
    }
    hasher.update(len);
    hasher.update(payload);
    hasher.finalize()
}

/// The whole frames after the header, and where the last one ends. Stops at the first frame
/// that is short or fails its checksum under `generation`: the tail a crash tore, zeroes, or a
/// frame of an earlier generation.
fn read_frames(bytes: &[u8], generation: Option<u32>) -> (Vec<Frame>, u64) {
    let mut frames = Vec::new();
    let mut at = WAL_HEADER_BYTES as usize;
    while let Some((frame, next)) = read_frame(bytes, at, generation) {
        frames.push(frame);
        at = next;
    }
    (frames, at as u64)
}

fn read_frame(bytes: &[u8], at: usize, generation: Option<u32>) -> Option<(Frame, usize)> {
    let head = bytes.get(at..at.checked_add(FRAME_HEAD_BYTES)?)?;
    let len = u32::from_le_bytes(head[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(head[4..].try_into().ok()?);
    let start = at + FRAME_HEAD_BYTES;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    if len < PAYLOAD_HEAD_BYTES || checksum(generation, &head[..4], payload) != crc {
        return None;
    }
    Some((decode_payload(payload)?, start + len))
}

fn decode_payload(payload: &[u8]) -> Option<Frame> {
    let first_seq = u64::from_le_bytes(payload[..8].try_into().ok()?);
    let count = u32::from_le_bytes(payload[8..12].try_into().ok()?);
    let mut records = Vec::new();
    let mut at = PAYLOAD_HEAD_BYTES;
    for _ in 0..count {
        let len_bytes = payload.get(at..at + 4)?;
        let len = u32::from_le_bytes(len_bytes.try_into().ok()?) as usize;
        records.push(payload.get(at + 4..(at + 4).checked_add(len)?)?.to_vec());
        at += 4 + len;
    }
    // A checksummed payload with bytes left over was not written by this layout.
    (at == payload.len() && count > 0).then_some(Frame { first_seq, records })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::StorageBackend;
    use std::sync::Arc;

    /// A backend the test keeps a handle on, to look at and tear the bytes the log wrote.
    #[derive(Debug, Clone, Default)]
    struct Shared(Arc<redb::backends::InMemoryBackend>);

    impl StorageBackend for Shared {
        fn len(&self) -> io::Result<u64> {
            self.0.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
            self.0.read(offset, out)
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.0.set_len(len)
        }
        fn sync_data(&self) -> io::Result<()> {
            self.0.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            self.0.write(offset, data)
        }
    }

    fn records(n: usize, tag: u8) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![tag; 10 + i * 7]).collect()
    }

    #[test]
    fn frames_come_back_in_order_after_a_reopen() {
        let file = Shared::default();
        let (mut wal, frames) = Wal::open(Box::new(file.clone())).unwrap();
        assert!(frames.is_empty());
        assert_eq!(file.len().unwrap(), WAL_HEADER_BYTES);
        wal.append(1, &records(3, b'a')).unwrap();
        wal.append(4, &records(1, b'b')).unwrap();
        assert_eq!(file.len().unwrap(), WAL_HEADER_BYTES + WAL_GROW_BYTES);
        let (wal, frames) = Wal::open(Box::new(file.clone())).unwrap();
        assert_eq!(
            frames,
            vec![
                Frame {
                    first_seq: 1,
                    records: records(3, b'a')
                },
                Frame {
                    first_seq: 4,
                    records: records(1, b'b')
                },
            ]
        );
        assert_eq!(frames[0].last_seq(), 3);
        let frame_bytes = 2 * (8 + 12) + (4 + 10) + (4 + 17) + (4 + 24) + (4 + 10);
        assert_eq!(wal.frame_bytes(), frame_bytes);
    }

    #[test]
    fn the_file_grows_ahead_by_a_step_and_a_frame_past_it_gets_room_whole() {
        let file = Shared::default();
        let (mut wal, _) = Wal::open(Box::new(file.clone())).unwrap();
        let big = vec![vec![7u8; WAL_GROW_BYTES as usize + 100]];
        wal.append(1, &big).unwrap();
        let after_big = WAL_HEADER_BYTES + 8 + 12 + 4 + WAL_GROW_BYTES + 100;
        assert_eq!(file.len().unwrap(), after_big);
        wal.append(2, &records(1, b'a')).unwrap();
        assert_eq!(file.len().unwrap(), after_big + WAL_GROW_BYTES);
        let (_, frames) = Wal::open(Box::new(file)).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].records, big);
    }

    #[test]
    fn a_torn_last_frame_is_dropped_at_every_cut_and_overwritten_by_the_next_append() {
        let file = Shared::default();
        let (mut wal, _) = Wal::open(Box::new(file.clone())).unwrap();
        wal.append(1, &records(2, b'a')).unwrap();
        let whole = WAL_HEADER_BYTES + wal.frame_bytes();
        wal.append(3, &records(2, b'b')).unwrap();
        let full = WAL_HEADER_BYTES + wal.frame_bytes();
        for cut in whole..full {
            // The file as a crash may leave it: the second frame's first bytes landed, the rest
            // of the grown file reads as zeroes.
            let torn = Shared::default();
            let mut bytes = vec![0; file.len().unwrap() as usize];
            file.read(0, &mut bytes[..cut as usize]).unwrap();
            torn.set_len(bytes.len() as u64).unwrap();
            torn.write(0, &bytes).unwrap();
            let (mut wal, frames) = Wal::open(Box::new(torn.clone())).unwrap();
            assert_eq!(frames.len(), 1, "cut at {cut}");
            assert_eq!(wal.frame_bytes() + WAL_HEADER_BYTES, whole);
            wal.append(3, &records(1, b'c')).unwrap();
            let (_, frames) = Wal::open(Box::new(torn)).unwrap();
            assert_eq!(frames.len(), 2, "cut at {cut}");
            assert_eq!(frames[1].records, records(1, b'c'));
        }
    }

    #[test]
    fn a_flipped_byte_ends_the_log_at_the_frame_before_it() {
        let file = Shared::default();
        let (mut wal, _) = Wal::open(Box::new(file.clone())).unwrap();
        wal.append(1, &records(1, b'a')).unwrap();
        let second = WAL_HEADER_BYTES + wal.frame_bytes();
        wal.append(2, &records(1, b'b')).unwrap();
        let mut byte = [0u8];
        file.read(second + 12, &mut byte).unwrap();
        file.write(second + 12, &[byte[0] ^ 1]).unwrap();
        let (_, frames) = Wal::open(Box::new(file)).unwrap();
        assert_eq!(frames.len(), 1);
    }

    #[test]
    fn a_checkpoint_is_due_at_either_limit_and_not_one_short_of_both() {
        assert!(!checkpoint_due(
            WAL_CHECKPOINT_APPENDS - 1,
            WAL_CHECKPOINT_BYTES - 1
        ));
        assert!(checkpoint_due(WAL_CHECKPOINT_APPENDS, 0));
        assert!(checkpoint_due(1, WAL_CHECKPOINT_BYTES));
    }

    #[test]
    fn reset_keeps_the_length_and_no_frame_of_the_generation_before_reads_back() {
        let file = Shared::default();
        let (mut wal, _) = Wal::open(Box::new(file.clone())).unwrap();
        wal.append(1, &records(4, b'a')).unwrap();
        wal.append(5, &records(4, b'b')).unwrap();
        let len = file.len().unwrap();
        wal.reset().unwrap();
        assert_eq!(
            file.len().unwrap(),
            len,
            "no blocks given back to allocate again"
        );
        assert_eq!(wal.frame_bytes(), 0);
        let (_, frames) = Wal::open(Box::new(file.clone())).unwrap();
        assert!(frames.is_empty(), "the old frames' bytes are still there");
        // A frame of the first old one's length over it: a reader then meets the second old
        // frame whole, where a frame starts, and its checksum under the old generation ends the
        // log.
        let (mut wal, _) = Wal::open(Box::new(file.clone())).unwrap();
        wal.append(9, &records(4, b'c')).unwrap();
        let (_, frames) = Wal::open(Box::new(file.clone())).unwrap();
        assert_eq!(
            frames,
            vec![Frame {
                first_seq: 9,
                records: records(4, b'c')
            }]
        );
        let mut bytes = vec![0; file.len().unwrap() as usize];
        file.read(0, &mut bytes).unwrap();
        assert_eq!(frames_in(&bytes).unwrap(), frames);
    }

    #[test]
    fn reset_cuts_a_file_grown_past_the_kept_length_back_to_it() {
        let file = Shared::default();
        let (mut wal, _) = Wal::open(Box::new(file.clone())).unwrap();
        let bulk = vec![vec![3u8; WAL_KEEP_BYTES as usize]];
        wal.append(1, &bulk).unwrap();
        assert!(file.len().unwrap() > WAL_KEEP_BYTES);
        wal.reset().unwrap();
        assert_eq!(file.len().unwrap(), WAL_KEEP_BYTES);
        wal.append(2, &records(1, b'a')).unwrap();
        assert_eq!(file.len().unwrap(), WAL_KEEP_BYTES, "the next frame fits");
        let (_, frames) = Wal::open(Box::new(file)).unwrap();
        assert_eq!(frames.len(), 1);
    }

    #[test]
    fn a_format_1_file_is_read_and_starts_its_first_generation_at_the_checkpoint() {
        // Format 1, as the build before generations wrote it: a header with four zero bytes
        // where the generation is now, and checksums without a generation.
        let file = Shared::default();
        let mut head = header(0);
        head[8..12].copy_from_slice(&1u32.to_le_bytes());
        let frame = encode_frame(None, 1, &records(2, b'a'));
        file.set_len(WAL_HEADER_BYTES + frame.len() as u64).unwrap();
        file.write(0, &head).unwrap();
        file.write(WAL_HEADER_BYTES, &frame).unwrap();
        let (mut wal, frames) = Wal::open(Box::new(file.clone())).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].records, records(2, b'a'));
        wal.append(3, &records(1, b'b')).unwrap();
        let (mut wal, frames) = Wal::open(Box::new(file.clone())).unwrap();
        assert_eq!(frames.len(), 2, "appended in the file's own format");
        wal.reset().unwrap();
        wal.append(4, &records(1, b'c')).unwrap();
        let mut bytes = [0u8; 16];
        file.read(0, &mut bytes).unwrap();
        assert_eq!(
            check_header(&bytes).unwrap(),
            Some(0),
            "format 2, generation 0"
        );
        let (_, frames) = Wal::open(Box::new(file)).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].first_seq, 4);
    }

    #[test]
    fn a_foreign_or_newer_file_is_refused_unchanged() {
        let foreign = Shared::default();
        foreign.set_len(26).unwrap();
        foreign.write(0, b"not a log, but long enough").unwrap();
        assert!(matches!(
            Wal::open(Box::new(foreign.clone())),
            Err(WalError::NotAWal)
        ));
        assert_eq!(foreign.len().unwrap(), 26);
        let newer = Shared::default();
        let mut head = header(0);
        head[8..12].copy_from_slice(&(WAL_FORMAT + 1).to_le_bytes());
        newer.set_len(WAL_HEADER_BYTES).unwrap();
        newer.write(0, &head).unwrap();
        assert!(matches!(
            Wal::open(Box::new(newer)),
            Err(WalError::NewerFormat { found }) if found == WAL_FORMAT + 1
        ));
    }
}
