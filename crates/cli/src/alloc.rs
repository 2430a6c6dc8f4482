//! The binary's memory allocator: jemalloc with transparent huge pages.
//!
//! A large simulation is bound by memory latency, and at 8,192 hosts most of
//! it was page walks: its packets, port queues, QPs and flow records are
//! hundreds of megabytes of small heap objects reached at random, and on
//! 4 KiB pages nearly every such access also missed the TLB. glibc's malloc
//! only asks for huge pages when `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` is
//! set in the environment, which no user would know to do; jemalloc takes
//! the same request from a string compiled into the binary. With
//! `thp:always` every extent jemalloc maps, data and metadata alike, is
//! advised `MADV_HUGEPAGE`, which the kernel honours in its default
//! `madvise` mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
//!
//! The allocator decides only where objects live, never what the simulator
//! computes: outputs are the same bit for bit (issue 12 part 4 checks this
//! on every shipped scenario). `_RJEM_MALLOC_CONF` in the environment
//! still overrides these settings, as jemalloc documents for
//! `MALLOC_CONF`: this build's symbols carry the `_rjem_` prefix, and so
//! does the variable it reads (plain `MALLOC_CONF` is ignored; check with
//! `_RJEM_MALLOC_CONF=stats_print:true`).

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, NUL-terminated as C expects.
///
/// `dirty_decay_ms:-1,muzzy_decay_ms:-1`: freed pages stay with the
/// process for its next allocations instead of going back to the kernel.
/// Why: a large run frees memory all the time (a finished QP's send log,
/// a port queue's old buffer after it grew), and under jemalloc's default
/// decay (10 s) the pages went back to the kernel and came in again a
/// moment later as fresh huge pages that it zeroed. On the k=32 fat tree's
/// whole 10 ms run that was 229,379 page faults; kept, 2,734, and the run
/// took 0.935 of the user time (537.8 s to 502.6 s, both builds at once,
/// one per core; outputs identical). The price is the peak: what was
/// freed counts until it is reused (1,348 to 1,532 MB there; 76 to 83 MB
/// on the 320-host run, which is as fast either way). A long-lived process
/// (`roce perf`'s server) keeps its high-water mark, as glibc's malloc
/// mostly does; `_RJEM_MALLOC_CONF=dirty_decay_ms:10000,muzzy_decay_ms:0`
/// restores jemalloc's defaults.
const CONF: &[u8] = b"thp:always,metadata_thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1\0";

/// jemalloc reads its compiled-in options from this `const char *` symbol
/// (`_rjem_` is the prefix of tikv-jemalloc-sys's build). `Option<&u8>` has
/// the layout of a nullable C pointer.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: Option<&u8> = Some(&CONF[0]);
