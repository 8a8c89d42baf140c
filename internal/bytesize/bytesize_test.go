package bytesize

import "testing"

func TestParseBound(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Bound
		wantErr bool
	}{
		{"", Bound{}, false},
		{"0", Bound{}, false},
		{"1073741824", Bound{Bytes: 1 << 30}, false},
		{"512MiB", Bound{Bytes: 512 << 20}, false},
		{"10G", Bound{Bytes: 10 << 30}, false},
		{"2GB", Bound{Bytes: 2e9}, false},
		{"1.5KiB", Bound{Bytes: 1536}, false},
		{"10%", Bound{Percent: 10}, false},
		{"0.5 %", Bound{Percent: 0.5}, false},
		{"101%", Bound{}, true},
		{"-1", Bound{}, true},
		{"lots", Bound{}, true},
		{"MiB", Bound{}, true},
	} {
		got, err := ParseBound(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseBound(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	if got := (Bound{Percent: 10}).Of(1000); got != 100 {
		t.Errorf("10%% of 1000 = %d", got)
	}
}
