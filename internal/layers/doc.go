// Package layers holds the test that keeps ckguard's imports running one way: from the commands down
// to the leaves, never back up. It has no code of its own; the layer of every package is the table in
// layers_test.go, and docs/DEVELOPING.md ("Layout") describes the same layers for people.
package layers
