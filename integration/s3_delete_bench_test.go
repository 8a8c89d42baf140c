package integration

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestS3DeleteBench is the deletion benchmark of scripts/bench-s3-delete.sh (skipped unless
// CKGUARD_BENCH_S3_DELETE=1): rm -rf of N unreferenced objects through the ckguard mount against
// `aws s3 rm --recursive`, s3fs and rclone mount, with the test proxy adding 0 ms and 20 ms to every
// request, side by side in one run. s3fs and rclone delete one object at a time (a HEAD or a listing plus a
// DeleteObject each), so at 20 ms they get BENCH_S3_PEER_N objects (default 1,000) and are compared per
// object. Figures are printed with the load average when each step started; nothing is asserted but that
// every deletion happened.
func TestS3DeleteBench(t *testing.T) {
	if os.Getenv("CKGUARD_BENCH_S3_DELETE") == "" {
		t.Skip("benchmark: set CKGUARD_BENCH_S3_DELETE=1 (scripts/bench-s3-delete.sh)")
	}
	n := envInt("BENCH_S3_DEL_N", 10000)
	peerN := envInt("BENCH_S3_PEER_N", 1000)
	timeout := time.Duration(envInt("BENCH_S3_TIMEOUT", 900)) * time.Second
	e := s3Start(t)
	lats := []time.Duration{0, 20 * time.Millisecond}
	tools := []string{"ckguard", "ckguard-q", "aws", "s3fs", "rclone"}
	have := map[string]bool{"ckguard": true, "ckguard-q": os.Getenv("BENCH_S3_QUARANTINE") != "", "aws": true}
	for _, tool := range []string{"s3fs", "rclone"} {
		_, err := exec.LookPath(tool)
		have[tool] = err == nil
	}
	count := func(tool string, lat time.Duration) int {
		if tool == "s3fs" || tool == "rclone" {
			return peerN
		}
		return n
	}
	prefix := func(tool string, lat time.Duration) string {
		return fmt.Sprintf("del-%s-%dms", tool, lat.Milliseconds())
	}
	// Objects are files in versitygw's posix directory, each with the ETag xattr a PUT would store.
	body := []byte("ckguard-bench-sst")
	sum := md5.Sum(body)
	etag := []byte(hex.EncodeToString(sum[:]))
	old := time.Now().Add(-30 * 24 * time.Hour)
	for _, lat := range lats {
		for _, tool := range tools {
			dir := filepath.Join(e.srv.DataDir, s3Bucket, prefix(tool, lat), "job", "chk-1")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range count(tool, lat) {
				p := filepath.Join(dir, fmt.Sprintf("state-%07d", i))
				if err := os.WriteFile(p, body, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Setxattr(p, "user.etag", etag, 0); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	c, err := s3client.New(context.Background(), e.srv.Config(), s3client.Location{Bucket: s3Bucket})
	if err != nil {
		t.Fatal(err)
	}
	left := func(p string) int {
		k := 0
		if err := c.Walk(context.Background(), p+"/", func(s3client.Object) error { k++; return nil }); err != nil {
			t.Fatal(err)
		}
		return k
	}
	type fig struct {
		secs float64
		n    int
		load string
		note string
	}
	figs := map[string]fig{}
	run := func(key string, objs int, p string, cmd *exec.Cmd) {
		load := loadAvg()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
		cmd.Env = append(os.Environ(), s3server.AWSEnv()...)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t0).Seconds()
		f := fig{secs: d, n: objs, load: load}
		if ctx.Err() != nil {
			f.note = fmt.Sprintf("timed out after %v", timeout)
		} else if err != nil {
			f.note = fmt.Sprintf("exit %v: %.200s", err, out)
		}
		if l := left(p); l != 0 {
			f.note += fmt.Sprintf(" %d objects left", l)
		}
		figs[key] = f
		t.Logf("%s: %.2f s for %d objects [load %s] %s", key, d, objs, load, f.note)
	}
	for _, lat := range lats {
		lk := fmt.Sprintf("%dms", lat.Milliseconds())
		// ckguard (and, with BENCH_S3_QUARANTINE, ckguard-q: --quarantine 24h, every deletion staged): the
		// mount comes up without latency (its initial sync lists the bucket), then the delay is set. rm -rf
		// returns once its folders' rmdir applied their queued deletions, so the time includes them.
		for _, tool := range []string{"ckguard", "ckguard-q"} {
			if !have[tool] {
				continue
			}
			ckguardRm(t, e, tool, lk, lat, n, prefix(tool, lat), run)
		}

		e.proxy.SetLatency(lat)
		p := prefix("aws", lat)
		run("aws "+lk, n, p, exec.Command(s3server.AWSCLI, "--endpoint-url", e.endpoint, "s3", "rm", "--recursive",
			"--only-show-errors", "s3://"+s3Bucket+"/"+p+"/"))

		if have["s3fs"] {
			e.proxy.SetLatency(0)
			mnt := t.TempDir()
			pw := filepath.Join(t.TempDir(), "passwd")
			_ = os.WriteFile(pw, []byte(s3server.AccessKey+":"+s3server.SecretKey), 0o600)
			m := exec.Command("s3fs", s3Bucket, mnt, "-f", "-o", "url="+e.endpoint, "-o", "use_path_request_style",
				"-o", "passwd_file="+pw, "-o", "endpoint="+s3server.Region)
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			waitMounted(t, mnt, m)
			e.proxy.SetLatency(lat)
			p := prefix("s3fs", lat)
			run("s3fs "+lk, peerN, p, exec.Command("rm", "-rf", filepath.Join(mnt, p)))
			e.proxy.SetLatency(0)
			_ = exec.Command("fusermount3", "-u", mnt).Run()
			_ = m.Process.Signal(syscall.SIGTERM)
			_ = m.Wait()
		}
		if have["rclone"] {
			e.proxy.SetLatency(0)
			mnt := t.TempDir()
			m := exec.Command("rclone", "mount", "--config", "/dev/null",
				fmt.Sprintf(":s3,provider=Other,env_auth=false,access_key_id=%s,secret_access_key=%s,region=%s,endpoint='%s':%s",
					s3server.AccessKey, s3server.SecretKey, s3server.Region, e.endpoint, s3Bucket), mnt)
			m.Env = append(os.Environ(), "AWS_CA_BUNDLE=")
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			waitMounted(t, mnt, m)
			e.proxy.SetLatency(lat)
			p := prefix("rclone", lat)
			run("rclone "+lk, peerN, p, exec.Command("rm", "-rf", filepath.Join(mnt, p)))
			e.proxy.SetLatency(0)
			_ = exec.Command("fusermount3", "-u", mnt).Run()
			_ = m.Process.Signal(syscall.SIGTERM)
			_ = m.Wait()
		}
	}
	up, _ := exec.Command("uptime").Output()
	var b strings.Builder
	fmt.Fprintf(&b, "\n== delete bench: versitygw posix on 127.0.0.1 behind the test proxy, %d cores; uptime: %s", numCPU(), up)
	fmt.Fprintf(&b, "%-22s %10s %10s %12s  %s\n", "rm of N objects", "objects", "seconds", "ms/object", "[load] note")
	per := map[string]float64{}
	for _, lat := range lats {
		lk := fmt.Sprintf("%dms", lat.Milliseconds())
		for _, tool := range tools {
			f, ok := figs[tool+" "+lk]
			if !ok {
				continue
			}
			per[tool+" "+lk] = f.secs * 1000 / float64(f.n)
			fmt.Fprintf(&b, "%-22s %10d %10.2f %12.3f  [load %s] %s\n", tool+" at "+lk, f.n, f.secs, per[tool+" "+lk], f.load, f.note)
		}
	}
	fmt.Fprintf(&b, "ratios per object (target at 20ms: ckguard/aws <= 1.0, s3fs/ckguard >= 10):\n")
	for _, lat := range lats {
		lk := fmt.Sprintf("%dms", lat.Milliseconds())
		ck := per["ckguard "+lk]
		for _, tool := range []string{"aws", "s3fs", "rclone"} {
			if v, ok := per[tool+" "+lk]; ok && ck > 0 && v > 0 {
				fmt.Fprintf(&b, "  %s: ckguard / %-6s = %.3f   (%s is %.1fx slower)\n", lk, tool, ck/v, tool, v/ck)
			}
		}
	}
	for _, lat := range lats {
		lk := fmt.Sprintf("%dms", lat.Milliseconds())
		if q, ck := per["ckguard-q "+lk], per["ckguard "+lk]; q > 0 && ck > 0 {
			fmt.Fprintf(&b, "  %s: quarantine on / off = %.3f\n", lk, q/ck)
		}
	}
	fmt.Print(b.String())
}

// ckguardRm times rm -rf of prefix p through a ckguard S3 mount (tool "ckguard-q": with --quarantine 24h).
func ckguardRm(t *testing.T, e *s3env, tool, lk string, lat time.Duration, n int, p string, run func(string, int, string, *exec.Cmd)) {
	e.proxy.SetLatency(0)
	mnt, idx := t.TempDir(), t.TempDir()
	args := []string{"mount", "--foreground", "--store", "s3://" + s3Bucket, "--index", idx, "--grace", "0s",
		"--sync-interval", "1h", "--max-staleness", "0s"}
	if tool == "ckguard-q" {
		args = append(args, "--quarantine", "24h")
	}
	args = append(args, e.mountArgs(mnt)...)
	g := exec.Command(e2eCkguard(t), args...)
	logf, _ := os.Create(filepath.Join(idx, "..", tool+"-"+lk+".log"))
	g.Stdout, g.Stderr = logf, logf
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	waitMounted(t, mnt, g)
	e.proxy.SetLatency(lat)
	run(tool+" "+lk, n, p, exec.Command("rm", "-rf", filepath.Join(mnt, p)))
	e.proxy.SetLatency(0)
	_ = g.Process.Signal(syscall.SIGTERM)
	_ = g.Wait()
	logf.Close()
	_ = exec.Command("fusermount3", "-uz", mnt).Run()
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func numCPU() int {
	out, _ := exec.Command("nproc").Output()
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// waitMounted waits until mnt is a mount point (of the process cmd, which must not exit first).
func waitMounted(t *testing.T, mnt string, cmd *exec.Cmd) {
	t.Helper()
	exited := make(chan struct{})
	go func() {
		for cmd.ProcessState == nil {
			if e2eIsMounted(mnt) {
				close(exited)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s not mounted after 2 minutes", mnt)
	}
}
