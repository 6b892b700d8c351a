;; loop: a function that never returns on a request starting with "!", and
;; echoes any other: its time limit must stop it.
;; ABI (docs/FUNCTIONS.md): export memory, alloc(len) -> ptr, handle(ptr, len) -> i64.
(module
  (memory (export "memory") 1)

  ;; The request goes at 1024 (64 KiB - 1024 bytes at most; -1 beyond).
  (func (export "alloc") (param $len i32) (result i32)
    (if (result i32) (i32.gt_u (local.get $len) (i32.const 64512))
      (then (i32.const -1))
      (else (i32.const 1024))))

  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (if (i32.and
          (i32.ne (local.get $len) (i32.const 0))
          (i32.eq (i32.load8_u (local.get $ptr)) (i32.const 33)))
      (then
        (loop $forever (br $forever))))
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len)))))
