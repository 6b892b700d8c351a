;; echo: the reply is the request (the built-in `echo`).
;; ABI (docs/FUNCTIONS.md): export memory, alloc(len) -> ptr, handle(ptr, len) -> i64.
(module
  (memory (export "memory") 1)

  ;; The request goes at 1024; memory grows to hold it.
  (func $alloc (export "alloc") (param $len i32) (result i32)
    (local $need i32)
    (local.set $need (i32.add (i32.const 1024) (local.get $len)))
    (if (i32.gt_u (local.get $need) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.sub
                  (i32.shr_u (i32.add (local.get $need) (i32.const 65535)) (i32.const 16))
                  (memory.size)))
              (i32.const -1))
          (then (return (i32.const -1))))))
    (i32.const 1024))

  ;; The reply is the request where it lies: pointer << 32 | length.
  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len)))))
