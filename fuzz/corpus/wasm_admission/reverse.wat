;; reverse: the request's bytes in reverse order (the built-in `reverse`).
;; ABI (docs/FUNCTIONS.md): export memory, alloc(len) -> ptr, handle(ptr, len) -> i64.
;; Copy this file to start a function of your own.
(module
  (memory (export "memory") 1)

  ;; The request goes at 1024 and the reply right after it; memory grows
  ;; to hold both. -1 (outside memory) when it cannot.
  (func (export "alloc") (param $len i32) (result i32)
    (local $need i32)
    (local.set $need
      (i32.add (i32.const 1024) (i32.shl (local.get $len) (i32.const 1))))
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

  ;; out[i] = in[len - 1 - i]; the reply is out: pointer << 32 | length.
  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (local $out i32)
    (local $src i32)
    (local $dst i32)
    (local.set $out (i32.add (local.get $ptr) (local.get $len)))
    (local.set $src (local.get $out))
    (local.set $dst (local.get $out))
    ;; Eight bytes at a time while they last: load, swap the bytes, store.
    (block $tail
      (loop $words
        (br_if $tail (i32.lt_u (i32.sub (local.get $src) (local.get $ptr)) (i32.const 8)))
        (local.set $src (i32.sub (local.get $src) (i32.const 8)))
        (i64.store (local.get $dst) (call $bswap64 (i64.load (local.get $src))))
        (local.set $dst (i32.add (local.get $dst) (i32.const 8)))
        (br $words)))
    (block $done
      (loop $bytes
        (br_if $done (i32.eq (local.get $src) (local.get $ptr)))
        (local.set $src (i32.sub (local.get $src) (i32.const 1)))
        (i32.store8 (local.get $dst) (i32.load8_u (local.get $src)))
        (local.set $dst (i32.add (local.get $dst) (i32.const 1)))
        (br $bytes)))
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $out)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))

  ;; WebAssembly has no byte swap: three swap steps (bytes, halves, words).
  (func $bswap64 (param $x i64) (result i64)
    (local.set $x
      (i64.or
        (i64.shr_u (i64.and (local.get $x) (i64.const 0xff00ff00ff00ff00)) (i64.const 8))
        (i64.shl (i64.and (local.get $x) (i64.const 0x00ff00ff00ff00ff)) (i64.const 8))))
    (local.set $x
      (i64.or
        (i64.shr_u (i64.and (local.get $x) (i64.const 0xffff0000ffff0000)) (i64.const 16))
        (i64.shl (i64.and (local.get $x) (i64.const 0x0000ffff0000ffff)) (i64.const 16))))
    (i64.rotl (local.get $x) (i64.const 32))))
