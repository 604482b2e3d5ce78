//! Programs that read their input: on a terminal and on a pipe.
