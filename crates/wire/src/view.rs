//! The part every header view shares: a buffer wrapped without copying, and
//! the two ways to make one.

/// Declares the view `$name<T: AsRef<[u8]>>` of a `$layer` header with
/// `new_unchecked`, `new_checked` (which runs the view's own `check_len`),
/// `into_inner`, and `buffer_len_checked` for `check_len` to start with
/// (the module's `HEADER_LEN` is the fixed header's length).
macro_rules! header_view {
    ($(#[$doc:meta])* $name:ident, $layer:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// A view without checks: accessors panic on a buffer shorter
            /// than the fields they read. For buffers known to hold the
            /// header (frames being built).
            pub fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            /// A view of a buffer that passes `check_len`.
            pub fn new_checked(buffer: T) -> $crate::error::Result<$name<T>> {
                let view = $name::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The buffer's length, if it holds the fixed header.
            fn buffer_len_checked(&self) -> $crate::error::Result<usize> {
                let len = self.buffer.as_ref().len();
                if len < HEADER_LEN {
                    return Err($crate::error::FrameError::Truncated($layer));
                }
                Ok(len)
            }
        }
    };
}

pub(crate) use header_view;
