package localguardd

import "testing"

func TestDirSpace(t *testing.T) {
	sp, err := dirSpace(t.TempDir())
	if err != nil || sp.Size <= 0 || sp.Free < 0 || sp.Free > sp.Size {
		t.Fatalf("dirSpace: %+v, %v", sp, err)
	}
	if _, err := dirSpace("/nonexistent/ckguard"); err == nil {
		t.Fatal("dirSpace of a missing folder: no error")
	}
}
