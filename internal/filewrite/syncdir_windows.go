package filewrite

// SyncDir does nothing on Windows: a directory cannot be opened for
// flushing there, and NTFS journals the rename itself.
func SyncDir(string) error { return nil }
