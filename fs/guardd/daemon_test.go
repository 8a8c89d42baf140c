package guardd_test

import (
	"testing"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
)

// runDaemon runs guardd.Run(cfg) until the test ends (see guarddtest.Start; tests of other backends
// call that with guardd.Serve).
func runDaemon(t *testing.T, cfg guardd.Config) (stop func()) {
	t.Helper()
	return guarddtest.Start(t, cfg, guardd.Run)
}
