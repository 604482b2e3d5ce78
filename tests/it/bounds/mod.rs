//! What one session may take of what the host's sessions share: the open
//! files of the host's table, and the service's upload slots.

mod open_files;
