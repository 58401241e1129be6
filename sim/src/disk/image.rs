//! The simulated disk's bytes, held in fixed-size chunks.
//!
//! Why chunks and not one `Vec<u8>`: redb grows its file a region at a time, and a `Vec` that
//! grows is moved whole to a new allocation at each doubling, its fresh pages faulted in and
//! zeroed by the kernel; a fleet week's image is hundreds of megabytes, and that growth (with
//! the copies the harness reads at each restart) was about 3 % of a `vigil-sim fleet` week.
//! Chunks never move once allocated, and a seed's freed chunks are the next seed's allocations
//! (the simulator's allocator keeps freed memory). They are shared copy-on-write, so the copy
//! of the disk the harness reads at each restart costs a chunk only where it writes (a store
//! opened on it may repair the file).

use std::sync::Arc;

/// Bytes per chunk: large enough that a 4 KiB page write rarely spans two, small enough that
/// the last chunk's unused tail is cheap.
pub const CHUNK_BYTES: usize = 1 << 20;

/// A file's bytes: `len` of them, in `len.div_ceil(CHUNK_BYTES)` chunks.
///
/// Invariant: every byte of a chunk at or past `len` is zero, so growing the file reads zeros
/// there without writing them.
#[derive(Clone, Default)]
pub struct Image {
    len: usize,
    chunks: Vec<Arc<Box<[u8]>>>,
}

impl Image {
    pub fn len(&self) -> usize {
        self.len
    }

    /// Sets the length: new bytes read as zero, removed ones are gone.
    pub fn set_len(&mut self, len: usize) {
        let chunks = len.div_ceil(CHUNK_BYTES);
        if len < self.len {
            // Keep the invariant: the kept chunks' bytes past the new end become zero.
            let kept_end = (chunks * CHUNK_BYTES).min(self.len);
            self.for_each_piece(len, kept_end, |piece, _| piece.fill(0));
            self.chunks.truncate(chunks);
        } else {
            self.chunks
                .resize_with(chunks, || Arc::new(vec![0; CHUNK_BYTES].into_boxed_slice()));
        }
        self.len = len;
    }

    /// Writes `data` at `offset`, growing the file with zeros if the write ends past it.
    pub fn write(&mut self, offset: usize, data: &[u8]) {
        let end = offset + data.len();
        if self.len < end {
            self.set_len(end);
        }
        self.for_each_piece(offset, end, |piece, at| {
            piece.copy_from_slice(&data[at - offset..at - offset + piece.len()]);
        });
    }

    /// Reads `out.len()` bytes at `offset`; false (and `out` untouched) if they pass the end.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> bool {
        let end = offset.saturating_add(out.len());
        if end > self.len {
            return false;
        }
        for piece in pieces(offset, end) {
            out[piece.at - offset..piece.at - offset + piece.len]
                .copy_from_slice(self.bytes(&piece));
        }
        true
    }

    /// The bytes from `start` to `end` (clamped to the file), empty when `start` is past it.
    /// Every write's undo record is one of these, so the bytes are copied once, never zeroed
    /// first.
    pub fn to_vec(&self, start: usize, end: usize) -> Vec<u8> {
        let end = end.min(self.len);
        let mut out = Vec::with_capacity(end.saturating_sub(start));
        for piece in pieces(start, end) {
            out.extend_from_slice(self.bytes(&piece));
        }
        out
    }

    fn bytes(&self, piece: &Piece) -> &[u8] {
        &self.chunks[piece.chunk][piece.within..piece.within + piece.len]
    }

    /// Calls `f` on each chunk-bounded piece of `start..end` (within the chunks), with the
    /// piece's file offset.
    fn for_each_piece(&mut self, start: usize, end: usize, mut f: impl FnMut(&mut [u8], usize)) {
        for piece in pieces(start, end) {
            let chunk = Arc::make_mut(&mut self.chunks[piece.chunk]);
            f(&mut chunk[piece.within..piece.within + piece.len], piece.at);
        }
    }
}

/// `len` bytes at file offset `at`: chunk `chunk`, from `within`.
struct Piece {
    at: usize,
    chunk: usize,
    within: usize,
    len: usize,
}

/// `start..end` cut at chunk boundaries, in order (none when `start >= end`).
fn pieces(start: usize, end: usize) -> impl Iterator<Item = Piece> {
    let mut at = start;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let (chunk, within) = (at / CHUNK_BYTES, at % CHUNK_BYTES);
        let len = (CHUNK_BYTES - within).min(end - at);
        let piece = Piece {
            at,
            chunk,
            within,
            len,
        };
        at += len;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What an image does to a plain `Vec<u8>`, operation by operation.
    #[derive(Debug, Clone)]
    enum Op {
        SetLen(usize),
        Write(usize, Vec<u8>),
    }

    /// Offsets around chunk boundaries, so pieces split and chunks come and go.
    fn offset() -> impl Strategy<Value = usize> {
        prop_oneof![
            0..64usize,
            (0..4usize, 0..16usize)
                .prop_map(|(chunk, d)| (chunk * CHUNK_BYTES).saturating_sub(8) + d),
            0..3 * CHUNK_BYTES,
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            offset().prop_map(Op::SetLen),
            (offset(), prop::collection::vec(any::<u8>(), 0..9000))
                .prop_map(|(o, d)| Op::Write(o, d)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every read, the length and every range copy agree with a `Vec<u8>` given the same
        /// operations (a shrink then a grow reads zeros, as a file does).
        #[test]
        fn an_image_reads_as_a_vec_would(ops in prop::collection::vec(op(), 1..12), probe in offset(), probe_len in 0..5000usize) {
            let (mut image, mut plain) = (Image::default(), Vec::<u8>::new());
            for op in ops {
                match op {
                    Op::SetLen(len) => {
                        image.set_len(len);
                        plain.resize(len, 0);
                    }
                    Op::Write(at, data) => {
                        image.write(at, &data);
                        if plain.len() < at + data.len() {
                            plain.resize(at + data.len(), 0);
                        }
                        plain[at..at + data.len()].copy_from_slice(&data);
                    }
                }
                prop_assert_eq!(image.len(), plain.len());
                prop_assert_eq!(image.chunks.len(), plain.len().div_ceil(CHUNK_BYTES));
            }
            prop_assert_eq!(image.to_vec(0, usize::MAX), plain.clone());
            let mut out = vec![0xEE; probe_len];
            let fits = probe + probe_len <= plain.len();
            prop_assert_eq!(image.read(probe, &mut out), fits);
            if fits {
                prop_assert_eq!(&out[..], &plain[probe..probe + probe_len]);
            } else {
                prop_assert!(out.iter().all(|&b| b == 0xEE), "a read past the end writes nothing");
            }
            prop_assert_eq!(image.to_vec(probe, probe + probe_len), plain.get(probe..(probe + probe_len).min(plain.len())).unwrap_or_default().to_vec());
            // A copy shares the chunks; writing or cutting either leaves the other as it was.
            let mut copy = image.clone();
            copy.write(probe, &[0x5A; 3000]);
            image.set_len(probe / 2);
            let mut cut = plain.clone();
            cut.resize(probe / 2, 0);
            prop_assert_eq!(image.to_vec(0, usize::MAX), cut);
            let mut written = plain.clone();
            if written.len() < probe + 3000 {
                written.resize(probe + 3000, 0);
            }
            written[probe..probe + 3000].fill(0x5A);
            prop_assert_eq!(copy.to_vec(0, usize::MAX), written);
        }
    }
}
