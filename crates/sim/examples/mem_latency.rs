//! How long one dependent load takes on this machine against the memory it
//! reaches at random: the price of a cache miss that the simulator's
//! per-event cost at 8,192 hosts follows (`scenarios/SCALE.md`).
//!
//! ```sh
//! cargo run --release -p roce-sim --example mem_latency            # huge pages, then 4 KiB pages
//! cargo run --release -p roce-sim --example mem_latency -- 16 512  # only these sizes (MiB)
//! ```
//!
//! Each size is a fresh anonymous mapping advised `MADV_HUGEPAGE` (as the
//! simulator's large tables and its allocator's extents are) or
//! `MADV_NOHUGEPAGE`, threaded with one pointer per 64-byte line in a
//! random cyclic order (a seeded shuffle, so every run walks the same
//! cycle), then walked: each load's address is the previous load's value,
//! so no two misses overlap and the figure is the latency itself, with
//! its page walk. Run it alone: anything else on the machine shares the
//! last-level cache and the memory bus.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use std::time::Instant;

const LINE: usize = 64;
const WALK: usize = 20_000_000;

fn main() {
    let sizes: Vec<usize> = {
        let asked: Vec<usize> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        if asked.is_empty() {
            vec![1, 8, 16, 32, 64, 256, 1024, 2048]
        } else {
            asked
        }
    };
    println!("MiB  huge pages ns  4 KiB pages ns");
    for &mib in &sizes {
        let huge = walk(mib << 20, true);
        let small = walk(mib << 20, false);
        match (huge, small) {
            (Some(h), Some(s)) => println!("{mib:>5}  {h:>13.1}  {s:>14.1}"),
            _ => println!("{mib:>5}  (could not map {mib} MiB)"),
        }
    }
}

/// Nanoseconds per dependent load over `bytes` of fresh memory.
#[cfg(target_os = "linux")]
fn walk(bytes: usize, huge: bool) -> Option<f64> {
    let lines = bytes / LINE;
    if lines < 2 {
        return None;
    }
    // SAFETY: a private anonymous mapping of `bytes`, checked for failure,
    // used only through `base` within its length, and unmapped before
    // return; the advice only sets a flag on it.
    unsafe {
        let base = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return None;
        }
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        libc::madvise(base, bytes, advice);
        let base = base.cast::<u8>();
        // A random cycle through every line: line order[i] points at
        // line order[i + 1].
        let mut order: Vec<u32> = (0..lines as u32).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for i in (1..lines).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        for i in 0..lines {
            let from = base.add(order[i] as usize * LINE).cast::<usize>();
            let to = base.add(order[(i + 1) % lines] as usize * LINE);
            from.write(to as usize);
        }
        drop(order);
        let mut p = base as usize;
        for _ in 0..WALK / 20 {
            p = *(p as *const usize);
        }
        let t = Instant::now();
        for _ in 0..WALK {
            p = *(p as *const usize);
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / WALK as f64;
        std::hint::black_box(p);
        libc::munmap(base.cast(), bytes);
        Some(ns)
    }
}

#[cfg(not(target_os = "linux"))]
fn walk(_bytes: usize, _huge: bool) -> Option<f64> {
    None
}
