//! How long one dependent load takes on this machine against the memory it
//! reaches at random: the price of a cache miss that the simulator's
//! per-event cost at 8,192 hosts follows (`scenarios/SCALE.md`).
//!
//! ```sh
//! cargo run --release -p roce-sim --example mem_latency            # huge pages, then 4 KiB pages
//! cargo run --release -p roce-sim --example mem_latency -- 16 512  # only these sizes (MiB)
//! cargo run --release -p roce-sim --example mem_latency -- pages    # what a page walk adds
//! ```
//!
//! `pages` walks 4,096 lines (256 KiB: they stay in the second-level
//! cache) spread one to a stride over ever wider mappings (huge pages
//! advised), so that only the number of 4 KiB pages they sit in changes:
//! what a translation the first-level TLB lacks costs when the lines
//! themselves hit (`scenarios/SCALE.md`, session 35).
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
    if std::env::args().nth(1).as_deref() == Some("pages") {
        const LINES: usize = 4096;
        println!("{LINES} lines over MiB  4 KiB pages  ns");
        for mib in [1usize, 4, 8, 16, 64, 256] {
            let stride = (mib << 20) / LINES;
            match walk(mib << 20, true, stride) {
                Some(ns) => println!("{mib:>16}  {:>11}  {ns:>4.1}", (mib << 20) / 4096),
                None => println!("{mib:>16}  (could not map)"),
            }
        }
        return;
    }
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
        let huge = walk(mib << 20, true, LINE);
        let small = walk(mib << 20, false, LINE);
        match (huge, small) {
            (Some(h), Some(s)) => println!("{mib:>5}  {h:>13.1}  {s:>14.1}"),
            _ => println!("{mib:>5}  (could not map {mib} MiB)"),
        }
    }
}

/// Nanoseconds per dependent load over `bytes` of fresh memory, one line
/// in every `stride` bytes (a multiple of the line; where in its stride
/// varies from line to line, so that the lines spread over the cache's
/// sets).
#[cfg(target_os = "linux")]
fn walk(bytes: usize, huge: bool, stride: usize) -> Option<f64> {
    let lines = bytes / stride;
    let per = stride / LINE;
    let at = |i: usize| i * stride + (i * 7 % per) * LINE;
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
            let from = base.add(at(order[i] as usize)).cast::<usize>();
            let to = base.add(at(order[(i + 1) % lines] as usize));
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
fn walk(_bytes: usize, _huge: bool, _stride: usize) -> Option<f64> {
    None
}
