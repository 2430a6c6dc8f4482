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
const CONF: &[u8] = b"thp:always,metadata_thp:always\0";

/// jemalloc reads its compiled-in options from this `const char *` symbol
/// (`_rjem_` is the prefix of tikv-jemalloc-sys's build). `Option<&u8>` has
/// the layout of a nullable C pointer.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: Option<&u8> = Some(&CONF[0]);
