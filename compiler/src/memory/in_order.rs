//! In-order allocation with a free list, like ggml's dynamic allocator
//! (`ggml_dyn_tallocr`): walk the steps; at each, allocate the buffers starting
//! there (best fit among free blocks, else at the top of the arena, growing it),
//! then free the buffers whose last step it was, merging adjacent free blocks.
//! It never looks ahead, so it shows what an in-order allocator costs.

use crate::liveness::Lifetime;

/// Offsets from an in-order best-fit allocator.
pub(super) fn place(buffers: &[Lifetime]) -> Vec<u64> {
    let mut allocs: Vec<usize> = (0..buffers.len()).collect();
    allocs.sort_by_key(|&i| (buffers[i].first, i));
    let mut frees = allocs.clone();
    frees.sort_by_key(|&i| (buffers[i].last, i));

    let mut offsets = vec![0u64; buffers.len()];
    let mut arena = FreeList::default();
    let mut next_free = 0;
    for &i in &allocs {
        // Buffers whose last step is before this one's first are dead now.
        while let Some(&j) = frees.get(next_free) {
            if buffers[j].last >= buffers[i].first {
                break;
            }
            arena.release(offsets[j], buffers[j].size);
            next_free += 1;
        }
        offsets[i] = arena.take(buffers[i].size);
    }
    offsets
}

/// Free blocks below `top`, sorted by offset, never adjacent to each other or
/// to `top` (those merge); everything from `top` up is free.
#[derive(Debug, Default)]
struct FreeList {
    blocks: Vec<(u64, u64)>,
    top: u64,
}

impl FreeList {
    /// An offset for `size` bytes: the smallest free block that fits (lowest
    /// offset among equals), else the top.
    fn take(&mut self, size: u64) -> u64 {
        if size == 0 {
            return 0;
        }
        let best = (0..self.blocks.len())
            .filter(|&k| self.blocks[k].1 >= size)
            .min_by_key(|&k| (self.blocks[k].1, self.blocks[k].0));
        match best {
            Some(k) => {
                let (offset, len) = self.blocks[k];
                if len == size {
                    self.blocks.remove(k);
                } else {
                    self.blocks[k] = (offset + size, len - size);
                }
                offset
            }
            None => {
                let offset = self.top;
                self.top += size;
                offset
            }
        }
    }

    /// Returns `[offset, offset + size)` to the free list.
    fn release(&mut self, offset: u64, size: u64) {
        if size == 0 {
            return;
        }
        let k = self.blocks.partition_point(|&(o, _)| o < offset);
        self.blocks.insert(k, (offset, size));
        if k + 1 < self.blocks.len() && offset + size == self.blocks[k + 1].0 {
            self.blocks[k].1 += self.blocks[k + 1].1;
            self.blocks.remove(k + 1);
        }
        if k > 0 && self.blocks[k - 1].0 + self.blocks[k - 1].1 == offset {
            self.blocks[k - 1].1 += self.blocks[k].1;
            self.blocks.remove(k);
        }
        if let Some(&(o, len)) = self.blocks.last()
            && o + len == self.top
        {
            self.top = o;
            self.blocks.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frees_merge_into_the_top_and_each_other() {
        let mut f = FreeList::default();
        let a = f.take(16);
        let b = f.take(32);
        let c = f.take(16);
        assert_eq!((a, b, c, f.top), (0, 16, 48, 64));
        f.release(a, 16);
        f.release(b, 32);
        assert_eq!(f.blocks, vec![(0, 48)]);
        assert_eq!(f.take(8), 0, "best fit reuses the merged block");
        f.release(c, 16);
        assert_eq!(
            (f.blocks.clone(), f.top),
            (vec![], 8),
            "the tail merged into the top"
        );
    }
}
