// Package minidfs starts a real HDFS for tests: Hadoop's MiniDFSCluster (one NameNode and one DataNode
// on 127.0.0.1, Hadoop 3.5.0 from Maven Central) in a JVM driven by the small launcher under java/,
// the way s3server starts versitygw.
//
// Sharing: a JVM takes 15–45 s to bring a cluster up, so by default every test of a binary that asks
// for the same Options shares one warm cluster, and each test gets its own empty directory (Root,
// "/t/<test name>-<n>") that is removed when the test ends. A test that stops the NameNode or puts it
// into safe mode changes the cluster for everyone and must ask for its own (Options.Exclusive);
// SafeMode, StopNameNode and RestartNameNode fail the test otherwise. The JVM exits when its stdin
// closes, so a cluster never outlives the test binary, even one killed with SIGKILL.
//
// Permissions are enforced (dfs.permissions.enabled) as on a real cluster; the user the tests run as
// started the NameNode and is its superuser (DFSAs, or a Go client with HADOOP_USER_NAME set to someone
// else, exercises the checks).
//
// Kerberos (Options.Kerberos): the JVM also runs a KDC (Hadoop's MiniKdc, realm CKGUARD.TEST on
// 127.0.0.1) and the cluster is secured as a production one is: Kerberos RPC, block access tokens, SASL
// on data transfer (Options.Protection), service-level authorization. Its superuser is the service
// principal's short name, hdfs; the tests' user is User (and Other, for permission checks), each with a
// keytab; every test's directory and every uploaded tree belongs to User. Cluster.Kerberos names the
// files a client needs (krb5.conf, HADOOP_CONF_DIR, keytabs) and writes ticket caches.
//
// Prerequisites: Java 17 on PATH and the Maven artifacts (`make setup-hdfs`). The launcher is built
// offline (`mvn -o`) once when its sources are newer than its jar. A missing prerequisite fails the
// test loudly naming `make setup-hdfs`: the tests that use this package are behind the `hdfs` build
// tag (`make test-hdfs`), so nobody runs them without asking for a real HDFS.
//
// The launcher's protocol (stdin/stdout, one line each way, TAB-separated; Launcher.java):
//
//	launcher → READY port=PORT [realm=REALM kdc=PORT]
//	go       → safemode enter|leave | stopnn | restartnn | upload LOCAL HDFS | settimes PATH MILLIS |
//	           dfs ARG... | dfsas USER ARG... | kinit USER CCACHE [SECONDS] | shutdown
//	launcher → OK EXIT BASE64(stdout) BASE64(stderr) | ERR BASE64(stack trace)
package minidfs

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options choose the cluster; tests asking for equal Options share one (unless Exclusive).
type Options struct {
	// TrashInterval is fs.trash.interval (on the NameNode and for the FsShell DFS runs): 0 turns
	// trash off; anything else is rounded up to whole minutes, the unit Hadoop reads.
	TrashInterval time.Duration
	// Exclusive starts a cluster of this test's own (stopped at its end), for tests that stop the
	// NameNode or enter safe mode.
	Exclusive bool
	// Kerberos secures the cluster with a KDC of its own (see the package doc).
	Kerberos bool
	// Protection is hadoop.rpc.protection and dfs.data.transfer.protection of a Kerberos cluster:
	// "authentication" (the default), "integrity" or "privacy".
	Protection string
	// NoAES leaves AES out of a privacy cluster's data transfer (no dfs.encrypt.data.transfer.cipher.
	// suites): the DataNodes protect the data with DIGEST-MD5's own ciphers (RC4, 3DES, DES).
	NoAES bool
}

// The principals (short names) of a Kerberos cluster's test users: User owns the tests' directories.
const (
	User  = "ckguard"
	Other = "mallory"
)

func (o Options) trashMinutes() int64 {
	if o.TrashInterval <= 0 {
		return 0
	}
	return int64((o.TrashInterval + time.Minute - 1) / time.Minute)
}

// startTimeout bounds the cluster start (15 s on an idle machine, 45 s on a loaded 2-core one).
const startTimeout = 4 * time.Minute

// Cluster is one test's handle on a running MiniDFSCluster.
type Cluster struct {
	p         *proc
	krb       *Kerberos
	root      string
	exclusive bool
	stopOnce  sync.Once
}

// proc is one launcher JVM.
type proc struct {
	port    int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *bufio.Reader
	mu      sync.Mutex // one request at a time
	logs    *tailBuffer
	done    chan struct{}
	started time.Duration
	nextDir int
	realm   string // a Kerberos cluster's realm; "" without Kerberos
	krbDir  string // its KDC's files (see Kerberos)
}

// shared holds the warm clusters of this test binary, one per Options. It is the one piece of
// package state: sharing a JVM across tests is the point of it.
var shared = struct {
	sync.Mutex
	m map[Options]*sharedEntry
}{m: map[Options]*sharedEntry{}}

type sharedEntry struct {
	once sync.Once
	p    *proc
	err  error
}

// Start returns a running cluster and a fresh directory of this test's own on it (Root). See the
// package doc for sharing. It fails the test when Java or the Maven artifacts are missing.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real HDFS (MiniDFSCluster) not started in -short mode")
	}
	var p *proc
	if opt.Exclusive {
		var err error
		if p, err = launch(opt); err != nil {
			t.Fatal(err)
		}
	} else {
		shared.Lock()
		e := shared.m[opt]
		if e == nil {
			e = &sharedEntry{}
			shared.m[opt] = e
		}
		shared.Unlock()
		e.once.Do(func() { e.p, e.err = launch(opt) })
		if e.err != nil {
			t.Fatal(e.err)
		}
		p = e.p
		select {
		case <-p.done:
			t.Fatalf("the shared MiniDFSCluster exited earlier in this test binary:\n%s", p.logs.String())
		default:
		}
	}
	c := &Cluster{p: p, exclusive: opt.Exclusive}
	if p.realm != "" {
		c.krb = &Kerberos{Realm: p.realm, dir: p.krbDir, c: c}
	}
	p.mu.Lock()
	p.nextDir++
	n := p.nextDir
	p.mu.Unlock()
	c.root = fmt.Sprintf("/t/%s-%d", sanitize(t.Name()), n)
	if _, err := c.DFS(t, "-mkdir", "-p", c.root); err != nil {
		c.Stop()
		t.Fatalf("minidfs: create the test's directory: %v", err)
	}
	if c.krb != nil {
		if _, err := c.DFS(t, "-chown", User, c.root); err != nil {
			c.Stop()
			t.Fatalf("minidfs: give the test's directory to %s: %v", User, err)
		}
	}
	t.Logf("minidfs: %s (cluster up in %s; this test's directory %s)", c.URI(""), p.started.Round(100*time.Millisecond), c.root)
	t.Cleanup(c.Stop)
	return c
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(name string) string { return unsafeName.ReplaceAllString(name, "_") }

// Addr is the NameNode's RPC address, "127.0.0.1:PORT".
func (c *Cluster) Addr() string { return "127.0.0.1:" + strconv.Itoa(c.p.port) }

// URI is the hdfs:// URI of an absolute path p on the cluster ("" is the cluster's root).
func (c *Cluster) URI(p string) string { return "hdfs://" + c.Addr() + p }

// Root is this test's own directory on the cluster (absolute, created empty by Start).
func (c *Cluster) Root() string { return c.root }

// Pid is the process id of the cluster's JVM (the NameNode and the DataNode), for benchmarks that
// account the CPU it spends.
func (c *Cluster) Pid() int { return c.p.cmd.Process.Pid }

// StartTime is how long the cluster's JVM took to come up.
func (c *Cluster) StartTime() time.Duration { return c.p.started }

// DFS runs `hdfs dfs ARGS` (Hadoop's FsShell, in the cluster's warm JVM, default FS the cluster) and
// returns its stdout; a non-zero exit is an error carrying the exit status and stderr.
func (c *Cluster) DFS(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return c.dfs(append([]string{"dfs"}, args...), args)
}

// DFSAs is DFS run as another HDFS user (simple authentication trusts the name; on a Kerberos cluster
// the user, User or Other, logs in from its keytab), for permission tests: the launcher's user is the
// cluster's superuser, whom no permission stops.
func (c *Cluster) DFSAs(t testing.TB, user string, args ...string) (string, error) {
	t.Helper()
	return c.dfs(append([]string{"dfsas", user}, args...), args)
}

func (c *Cluster) dfs(req, args []string) (string, error) {
	rc, out, stderr, err := c.p.call(req...)
	if err != nil {
		return out, fmt.Errorf("hdfs dfs %s: %w", strings.Join(args, " "), err)
	}
	if rc != 0 {
		return out, &DFSError{Args: args, Exit: rc, Stderr: stderr}
	}
	return out, nil
}

// DFSError is a non-zero exit of `hdfs dfs`.
type DFSError struct {
	Args   []string
	Exit   int
	Stderr string
}

func (e *DFSError) Error() string {
	return fmt.Sprintf("hdfs dfs %s: exit %d: %s", strings.Join(e.Args, " "), e.Exit, strings.TrimSpace(e.Stderr))
}

// Upload copies the local tree localDir to hdfsDir (created), keeping every file's and directory's
// mtime, so backdated trees arrive backdated.
func (c *Cluster) Upload(t testing.TB, localDir, hdfsDir string) {
	t.Helper()
	abs, err := filepath.Abs(localDir)
	if err != nil {
		t.Fatal(err)
	}
	c.must(t, "upload", abs, hdfsDir)
}

// SetTimes sets the mtime of p (a file or directory; its atime is left as is).
func (c *Cluster) SetTimes(t testing.TB, p string, mtime time.Time) {
	t.Helper()
	c.must(t, "settimes", p, strconv.FormatInt(mtime.UnixMilli(), 10))
}

// SafeMode puts the NameNode into safe mode (enter) or takes it out. Exclusive clusters only.
func (c *Cluster) SafeMode(t testing.TB, enter bool) {
	t.Helper()
	c.requireExclusive(t, "SafeMode")
	arg := "leave"
	if enter {
		arg = "enter"
	}
	c.must(t, "safemode", arg)
}

// StopNameNode stops the NameNode (the DataNode keeps running): clients get connection refused.
// Exclusive clusters only.
func (c *Cluster) StopNameNode(t testing.TB) {
	t.Helper()
	c.requireExclusive(t, "StopNameNode")
	c.must(t, "stopnn")
}

// RestartNameNode starts the NameNode again (after StopNameNode, or restarts a running one) on the
// same port with the same namespace, and waits until it is active and out of safe mode.
// Exclusive clusters only.
func (c *Cluster) RestartNameNode(t testing.TB) {
	t.Helper()
	c.requireExclusive(t, "RestartNameNode")
	c.must(t, "restartnn")
}

// Stop ends this test's use of the cluster: an exclusive cluster shuts down; on a shared one the
// test's directory is removed. Idempotent; Start registers it as a cleanup.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.exclusive {
			c.p.shutdown()
			return
		}
		if c.root != "" {
			_, _, _, _ = c.p.call("dfs", "-rm", "-r", "-f", "-skipTrash", c.root)
		}
	})
}

func (c *Cluster) requireExclusive(t testing.TB, what string) {
	t.Helper()
	if !c.exclusive {
		t.Fatalf("minidfs: %s changes the cluster every test of the binary shares: start it with Options{Exclusive: true}", what)
	}
}

func (c *Cluster) must(t testing.TB, args ...string) {
	t.Helper()
	rc, _, stderr, err := c.p.call(args...)
	if err == nil && rc != 0 {
		err = fmt.Errorf("exit %d: %s", rc, stderr)
	}
	if err != nil {
		t.Fatalf("minidfs %s: %v", strings.Join(args, " "), err)
	}
}

// call sends one request and reads its answer.
func (p *proc) call(args ...string) (rc int, stdout, stderr string, err error) {
	for _, a := range args {
		if strings.ContainsAny(a, "\t\n") {
			return 0, "", "", fmt.Errorf("minidfs: argument %q holds a TAB or newline, which the launcher protocol cannot carry", a)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return 0, "", "", fmt.Errorf("minidfs: the cluster's JVM has exited:\n%s", p.logs.String())
	default:
	}
	if _, err := io.WriteString(p.stdin, strings.Join(args, "\t")+"\n"); err != nil {
		return 0, "", "", fmt.Errorf("minidfs: send %s: %w\n%s", args[0], err, p.logs.String())
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return 0, "", "", fmt.Errorf("minidfs: no answer to %s (%v); the JVM's log:\n%s", args[0], err, p.logs.String())
	}
	f := strings.Split(strings.TrimRight(line, "\n"), "\t")
	switch {
	case f[0] == "ERR" && len(f) == 2:
		msg, _ := base64.StdEncoding.DecodeString(f[1])
		return 0, "", "", fmt.Errorf("minidfs %s failed in the JVM: %s", args[0], msg)
	case f[0] == "OK" && len(f) == 4:
		rc, err := strconv.Atoi(f[1])
		if err != nil {
			return 0, "", "", fmt.Errorf("minidfs: bad answer %q", line)
		}
		o, err1 := base64.StdEncoding.DecodeString(f[2])
		e, err2 := base64.StdEncoding.DecodeString(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return 0, "", "", fmt.Errorf("minidfs: bad answer %q: %w", line, err)
		}
		return rc, string(o), string(e), nil
	}
	return 0, "", "", fmt.Errorf("minidfs: bad answer %q", line)
}

func (p *proc) shutdown() {
	p.mu.Lock()
	_, _ = io.WriteString(p.stdin, "shutdown\n")
	_ = p.stdin.Close()
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// launch starts a launcher JVM and waits for its READY line.
func launch(opt Options) (*proc, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, errors.New("minidfs: java not found on PATH: run `make setup-hdfs` (Java 17 and the Hadoop 3.5.0 artifacts)")
	}
	cp, err := Classpath()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "minidfs-")
	if err != nil {
		return nil, err
	}
	args := append(jvmFlags(), "-cp", cp, "io.ckguard.minidfs.Launcher",
		"--base-dir", base, "--trash-minutes", strconv.FormatInt(opt.trashMinutes(), 10))
	krbDir := ""
	if opt.Kerberos {
		prot := opt.Protection
		if prot == "" {
			prot = "authentication"
		}
		if !slices.Contains([]string{"authentication", "integrity", "privacy"}, prot) {
			return nil, fmt.Errorf("minidfs: Protection %q: want authentication, integrity or privacy", prot)
		}
		// Outside base: MiniDFSCluster removes base at shutdown, the KDC's files must last as long.
		if krbDir, err = os.MkdirTemp("", "minikdc-"); err != nil {
			return nil, err
		}
		args = append(args, "--kerberos-dir", krbDir, "--protection", prot, "--users", User+","+Other)
		if opt.NoAES {
			args = append(args, "--no-aes")
		}
	}
	cmd := exec.Command(java, args...)
	// Its own process group: a hung JVM is killed with everything it started, and nothing else.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{cmd: cmd, logs: newTailBuffer(64 << 10), done: make(chan struct{}), krbDir: krbDir}
	cmd.Stderr = p.logs
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReaderSize(stdout, 1<<20)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("minidfs: start java: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		// MiniDFSCluster.shutdown(true) removes base; this catches a JVM that died first.
		_ = os.RemoveAll(base)
		if krbDir != "" {
			_ = os.RemoveAll(krbDir)
		}
		close(p.done)
	}()
	ready := make(chan error, 1)
	go func() {
		line, err := p.out.ReadString('\n')
		if err != nil {
			ready <- fmt.Errorf("the JVM exited before the cluster was up (%v)", err)
			return
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "READY" || !strings.HasPrefix(f[1], "port=") {
			ready <- fmt.Errorf("unexpected first line %q", line)
			return
		}
		p.port, err = strconv.Atoi(strings.TrimPrefix(f[1], "port="))
		for _, kv := range f[2:] {
			if v, ok := strings.CutPrefix(kv, "realm="); ok {
				p.realm = v
			}
		}
		if err == nil && opt.Kerberos && p.realm == "" {
			err = fmt.Errorf("a Kerberos cluster came up without a realm: %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(startTimeout):
		err = fmt.Errorf("not up after %s", startTimeout)
	}
	if err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return nil, fmt.Errorf("minidfs: MiniDFSCluster did not start: %v; the JVM's log:\n%s", err, p.logs.String())
	}
	p.started = time.Since(t0)
	return p, nil
}

// jvmFlags are the launcher JVM's options: C1 only and the serial collector start a cluster fastest
// (a test cluster is short-lived and small). CKGUARD_MINIDFS_JAVA_OPTS replaces them.
func jvmFlags() []string {
	if v := os.Getenv("CKGUARD_MINIDFS_JAVA_OPTS"); v != "" {
		return strings.Fields(v)
	}
	return []string{"-Xmx768m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}
}

// JavaDir is the launcher's Maven project (hdfsbackend/hdfstest/minidfs/java).
func JavaDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "java")
}

var build struct {
	once sync.Once
	cp   string
	err  error
}

// Classpath builds the launcher if its sources changed (offline, once per test binary, under a file
// lock so that test binaries running at once do not build into the same folder together) and
// returns the JVM classpath of the launcher and Hadoop 3.5.0 (client, runtime, minicluster): also the
// classpath for Hadoop's own tools (org.apache.hadoop.fs.FsShell) and the benchmark programs.
func Classpath() (string, error) {
	build.once.Do(func() { build.cp, build.err = buildLauncher() })
	return build.cp, build.err
}

func buildLauncher() (string, error) {
	dir := JavaDir()
	jar := filepath.Join(dir, "target", "ckguard-minidfs-1.0.jar")
	cpFile := filepath.Join(dir, "target", "classpath.txt")
	lock, err := os.OpenFile(filepath.Join(dir, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("minidfs: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("minidfs: lock %s: %w", lock.Name(), err)
	}
	if stale(dir, jar, cpFile) {
		if _, err := exec.LookPath("mvn"); err != nil {
			return "", errors.New("minidfs: mvn not found on PATH: run `make setup-hdfs` (Java 17, Maven and the Hadoop 3.5.0 artifacts)")
		}
		cmd := exec.Command("mvn", "-o", "-q", "-B", "--no-transfer-progress", "-Dstyle.color=never", "package", "dependency:build-classpath")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("minidfs: build the MiniDFSCluster launcher offline (mvn -o package in %s) failed: %v; run `make setup-hdfs` to fetch the Hadoop 3.5.0 artifacts\n%s", dir, err, out)
		}
	}
	b, err := os.ReadFile(cpFile)
	if err != nil {
		return "", fmt.Errorf("minidfs: %w (run `make setup-hdfs`)", err)
	}
	return jar + ":" + strings.TrimSpace(string(b)), nil
}

// stale reports whether the launcher's jar is missing or older than its sources.
func stale(dir, jar, cpFile string) bool {
	st, err := os.Stat(jar)
	if err != nil {
		return true
	}
	if _, err := os.Stat(cpFile); err != nil {
		return true
	}
	newer := false
	_ = filepath.WalkDir(filepath.Join(dir, "src"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil && fi.ModTime().After(st.ModTime()) {
				newer = true
			}
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(dir, "pom.xml")); err == nil && fi.ModTime().After(st.ModTime()) {
		newer = true
	}
	return newer
}

// JavaCmd is a command running class (a main of the launcher's jar, such as the benchmarks'
// io.ckguard.minidfs.Bench, or of Hadoop's, such as org.apache.hadoop.fs.FsShell) in a JVM of its own
// with the launcher's classpath (JVM options: CKGUARD_MINIDFS_TOOL_JAVA_OPTS, default -Xmx1g).
func JavaCmd(t testing.TB, class string, args ...string) *exec.Cmd {
	t.Helper()
	cp, err := Classpath()
	if err != nil {
		t.Fatal(err)
	}
	// The JVM's defaults (full JIT), not the launcher's fast-start flags: benchmark figures of Hadoop's
	// own client must be its best.
	flags := []string{"-Xmx1g"}
	if v := os.Getenv("CKGUARD_MINIDFS_TOOL_JAVA_OPTS"); v != "" {
		flags = strings.Fields(v)
	}
	return exec.Command("java", append(append(flags, "-cp", cp, class), args...)...)
}

// tailBuffer keeps the last max bytes written to it (the JVM's stderr, for failure messages).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > b.max {
		b.b = append(b.b[:0], b.b[len(b.b)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}
