;; A minimal wasi_snapshot_preview1 adapter for Go plugins (GOOS=wasip1, -buildmode=c-shared).
;;
;; Why not the standard reactor adapter: it allocates its own stack and state through the main
;; module's `cabi_realloc` (or `memory.grow`) on the first WASI call, and the Go runtime makes
;; WASI calls while it initialises, before any Go function can run, and owns every page above
;; its data: a Go `cabi_realloc` cannot run yet, and pages grown behind Go's back are reused by
;; its heap. This adapter needs neither: it keeps no state, uses no stack and allocates nothing.
;;
;; It implements exactly the preview1 functions the Go runtime imports, on top of
;; wasi:clocks (time), wasi:random (seeds) and wasmop:plugin/log (stdout and stderr, so a Go
;; panic shows in the operator log). There are no arguments, no environment, no preopened
;; directories and no files: the same deny-all sandbox the host gives every plugin.
(module
  (import "env" "memory" (memory 0))
  (import "wasi:clocks/monotonic-clock@0.2.0" "now" (func $monotonic_now (result i64)))
  ;; Writes the datetime record {seconds: u64 @0, nanoseconds: u32 @8} at the given address.
  (import "wasi:clocks/wall-clock@0.2.0" "now" (func $wall_now (param i32)))
  (import "wasi:random/random@0.2.0" "get-random-u64" (func $random_u64 (result i64)))
  (import "wasmop:plugin/log@0.1.0" "log" (func $log (param i32 i32 i32)))

  (global $EBADF i32 (i32.const 8))
  (global $EINVAL i32 (i32.const 28))

  (func (export "args_sizes_get") (param $count i32) (param $size i32) (result i32)
    (i32.store (local.get $count) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    (i32.const 0))
  (func (export "args_get") (param i32 i32) (result i32) (i32.const 0))
  (func (export "environ_sizes_get") (param $count i32) (param $size i32) (result i32)
    (i32.store (local.get $count) (i32.const 0))
    (i32.store (local.get $size) (i32.const 0))
    (i32.const 0))
  (func (export "environ_get") (param i32 i32) (result i32) (i32.const 0))

  ;; clock_time_get(id, precision, *timestamp): 0 realtime, 1 monotonic, in nanoseconds.
  (func (export "clock_time_get") (param $id i32) (param $precision i64) (param $out i32) (result i32)
    (local $saved i64) (local $seconds i64) (local $nanos i32)
    (if (i32.eq (local.get $id) (i32.const 1))
      (then
        (i64.store (local.get $out) (call $monotonic_now))
        (return (i32.const 0))))
    (if (i32.ne (local.get $id) (i32.const 0))
      (then (return (global.get $EINVAL))))
    ;; The 16-byte datetime record is written over the caller's 8-byte result and the 8 bytes
    ;; after it, which are restored after: Go is blocked in this call.
    (local.set $saved (i64.load offset=8 (local.get $out)))
    (call $wall_now (local.get $out))
    (local.set $seconds (i64.load (local.get $out)))
    (local.set $nanos (i32.load offset=8 (local.get $out)))
    (i64.store offset=8 (local.get $out) (local.get $saved))
    (i64.store (local.get $out)
      (i64.add
        (i64.mul (local.get $seconds) (i64.const 1000000000))
        (i64.extend_i32_u (local.get $nanos))))
    (i32.const 0))

  (func (export "random_get") (param $buf i32) (param $len i32) (result i32)
    (local $word i64)
    (block $done
      (loop $words
        (br_if $done (i32.lt_u (local.get $len) (i32.const 8)))
        (i64.store (local.get $buf) (call $random_u64))
        (local.set $buf (i32.add (local.get $buf) (i32.const 8)))
        (local.set $len (i32.sub (local.get $len) (i32.const 8)))
        (br $words)))
    (local.set $word (call $random_u64))
    (block $tail_done
      (loop $bytes
        (br_if $tail_done (i32.eqz (local.get $len)))
        (i64.store8 (local.get $buf) (local.get $word))
        (local.set $word (i64.shr_u (local.get $word) (i64.const 8)))
        (local.set $buf (i32.add (local.get $buf) (i32.const 1)))
        (local.set $len (i32.sub (local.get $len) (i32.const 1)))
        (br $bytes)))
    (i32.const 0))

  ;; fd_write(fd, *iovs, iovs_len, *written): stdout goes to the log at info, stderr at warn.
  (func (export "fd_write") (param $fd i32) (param $iovs i32) (param $count i32) (param $written i32) (result i32)
    (local $level i32) (local $total i32) (local $ptr i32) (local $len i32)
    (if (i32.eq (local.get $fd) (i32.const 1)) (then (local.set $level (i32.const 2))))
    (if (i32.eq (local.get $fd) (i32.const 2)) (then (local.set $level (i32.const 3))))
    (if (i32.eqz (local.get $level)) (then (return (global.get $EBADF))))
    (block $done
      (loop $each
        (br_if $done (i32.eqz (local.get $count)))
        (local.set $ptr (i32.load (local.get $iovs)))
        (local.set $len (i32.load offset=4 (local.get $iovs)))
        (if (local.get $len)
          (then (call $log (local.get $level) (local.get $ptr) (local.get $len))))
        (local.set $total (i32.add (local.get $total) (local.get $len)))
        (local.set $iovs (i32.add (local.get $iovs) (i32.const 8)))
        (local.set $count (i32.sub (local.get $count) (i32.const 1)))
        (br $each)))
    (i32.store (local.get $written) (local.get $total))
    (i32.const 0))

  ;; poll_oneoff: every subscription fires at once (a sleep returns immediately and the Go
  ;; scheduler checks its timers again; the host's epoch deadline bounds any wait).
  ;; subscription: userdata u64 @0, tag u8 @8 (48 bytes); event: userdata @0, error u16 @8,
  ;; type u8 @10 (32 bytes).
  (func (export "poll_oneoff") (param $in i32) (param $out i32) (param $count i32) (param $events i32) (result i32)
    (local $i i32)
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (i64.store (local.get $out) (i64.load (local.get $in)))
        (i32.store16 offset=8 (local.get $out) (i32.const 0))
        (i32.store8 offset=10 (local.get $out) (i32.load8_u offset=8 (local.get $in)))
        (local.set $in (i32.add (local.get $in) (i32.const 48)))
        (local.set $out (i32.add (local.get $out) (i32.const 32)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (i32.store (local.get $events) (local.get $count))
    (i32.const 0))

  (func (export "sched_yield") (result i32) (i32.const 0))
  (func (export "proc_exit") (param i32) (unreachable))

  ;; stdin, stdout and stderr are character devices; there are no other descriptors.
  ;; fdstat: filetype u8 @0, flags u16 @2, rights_base u64 @8, rights_inheriting u64 @16.
  (func (export "fd_fdstat_get") (param $fd i32) (param $stat i32) (result i32)
    (if (i32.gt_u (local.get $fd) (i32.const 2)) (then (return (global.get $EBADF))))
    (i64.store (local.get $stat) (i64.const 2))
    (i64.store offset=8 (local.get $stat) (i64.const -1))
    (i64.store offset=16 (local.get $stat) (i64.const 0))
    (i32.const 0))
  (func (export "fd_fdstat_set_flags") (param $fd i32) (param i32) (result i32)
    (if (i32.gt_u (local.get $fd) (i32.const 2)) (then (return (global.get $EBADF))))
    (i32.const 0))
  (func (export "fd_close") (param i32) (result i32) (global.get $EBADF))
  (func (export "fd_prestat_get") (param i32 i32) (result i32) (global.get $EBADF))
  (func (export "fd_prestat_dir_name") (param i32 i32 i32) (result i32) (global.get $EBADF))
)
