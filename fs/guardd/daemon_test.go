package guardd_test

import (
	"testing"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/localbackend/localguardd"
)

// runDaemon runs localguardd.Run(cfg) until the test ends (see guarddtest.Start; tests of other backends
// call that with guardd.Serve).
func runDaemon(t *testing.T, cfg guardd.Config) (stop func()) {
	t.Helper()
	return guarddtest.Start(t, cfg, localguardd.Run)
}
