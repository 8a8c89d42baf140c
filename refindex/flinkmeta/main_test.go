package flinkmeta

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	panicOnBug = true // a recovered panic would hide a missing bounds check
	os.Exit(m.Run())
}
