// Package fsync makes renames and links durable: after a new name is made in a folder, the folder
// itself must reach the disk, or a crash can leave the file written under its old name (or none).
package fsync

import "os"

// Dir flushes the folder dir to the disk, so that the names made or removed in it survive a crash.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
