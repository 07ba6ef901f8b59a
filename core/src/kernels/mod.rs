//! The kernels of the declared families (NOTE [Declared families]):
//! slice-level arithmetic, one type per family implementing
//! [`Declared`](crate::backend::declared::Declared), named by the
//! family's row of the table (NOTE [Family table]).
//!
//! They see bytes, layouts, dtypes and parameter words, never a tensor
//! or a storage, and import nothing from the reference backend (`cpu`):
//! the reference backend, the threaded backend and the planned replayer
//! all call them, so eager and replayed results are one computation.

pub mod im2col;
pub mod pool;
pub mod scatter;
