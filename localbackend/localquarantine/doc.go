// Package localquarantine is the quarantine engine of a local (or NFS) store: the folder
// <store>/.ckguard-quarantine beside the checkpoints, reached through a descriptor of the store root.
// The entry model, the names, the service and the purge rules it implements are package quarantine's.
//
// Layout: <store>/.ckguard-quarantine/<name> is the object. Its name is its entry record
// when the key fits one (EntryName: a staging is the rename alone); otherwise it is a plain <id> and its
// record a line of the folder's journal (entries.jsonl, JournalName).
// Every change keeps one invariant across a crash at any point: an object is at its original key or in
// the folder, never lost and never in both, and never in the folder without its key known unless its
// record was lost to a power failure (a problem, never purged). A journal record is written before the
// object moves, and removed after it moved back (restore) or was destroyed (purge); a record whose object
// is not in the folder is therefore no entry (the object is at its original key, or purged) and is
// skipped, then cleared by the next purge.
package localquarantine
