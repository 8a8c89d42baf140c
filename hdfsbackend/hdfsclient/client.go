package hdfsclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"
	"github.com/colinmarc/hdfs/v2/hadoopconf"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/dtsasl"
	krb "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/keytab"
)

// Config says how to reach one HDFS cluster.
type Config struct {
	Resolved Resolved
	// User is the HDFS user for simple authentication (UserName()); ignored with Kerberos.
	User string
	// Conf is the Hadoop configuration (LoadConf), for Kerberos and data-transfer settings; may be nil.
	Conf hadoopconf.HadoopConf
	// Kerberos, when Enabled, authenticates with a keytab or a ticket cache.
	Kerberos Kerberos
	// RPCTimeout bounds every read and write on a NameNode or DataNode connection (the library takes
	// no context): a hung NameNode fails the call with ErrUnavailable instead of blocking the mount.
	// Default 30s.
	RPCTimeout time.Duration
	// Logger gets the client's WARNs (a ticket cache not renewed in time); default slog.Default().
	Logger *slog.Logger
}

// Kerberos configures Kerberos authentication (hadoop.security.authentication=kerberos).
type Kerberos struct {
	Enabled bool
	// Keytab and Principal ("flink/host@REALM"): log in from a keytab. Otherwise the ticket cache
	// CCache (default: $KRB5CCNAME, else /tmp/krb5cc_<uid>) is used, as `kinit` left it.
	Keytab, Principal string
	CCache            string
	// Krb5Conf is the krb5.conf (default: $KRB5_CONFIG, else /etc/krb5.conf).
	Krb5Conf string
	// ServicePrincipal is the NameNode's principal without the realm ("nn/_HOST"); default from
	// dfs.namenode.kerberos.principal.
	ServicePrincipal string
}

// ConfigFromEnv builds the Config for a store URI the way the Hadoop client would: HADOOP_CONF_DIR for
// nameservices, fs.defaultFS and Kerberos; HADOOP_USER_NAME or the login for the user; KRB5CCNAME and
// KRB5_CONFIG for Kerberos. krb overrides what the environment says (keytab/principal flags).
func ConfigFromEnv(uri string, krb Kerberos) (Config, error) {
	conf, err := LoadConf()
	if err != nil {
		return Config{}, err
	}
	res, err := ResolveStore(uri, conf)
	if err != nil {
		return Config{}, err
	}
	cfg := Config{Resolved: res, Conf: conf, Kerberos: krb}
	if strings.EqualFold(conf["hadoop.security.authentication"], "kerberos") || krb.Keytab != "" {
		cfg.Kerberos.Enabled = true
	}
	if !cfg.Kerberos.Enabled {
		if cfg.User, err = UserName(); err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}

// Client is the FS over the colinmarc/hdfs library.
type Client struct {
	genMu   sync.RWMutex // guards gen; a swap takes it exclusively, acquire shared
	gen     *generation
	user    string
	timeout time.Duration

	mu       sync.Mutex
	defaults *Defaults

	stop        chan struct{}                   // closed by Close: ends the ticket watch
	reloadCache func(*credentials.CCache) error // a ticket-cache login's reload (tests)
	closeOnce   sync.Once

	ccache string           // a ticket-cache login's cache file, for the expiry errors
	now    func() time.Time // nil: time.Now (unit tests set it)
}

var _ FS = (*Client)(nil)

// Dial connects to the cluster (the library connects lazily per call; Dial checks the NameNode
// answers, so a wrong address fails here and not at the first decision).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if len(cfg.Resolved.Addresses) == 0 {
		return nil, errors.New("HDFS: no NameNode address")
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = 30 * time.Second
	}
	opts := hdfs.ClientOptionsFromConf(cfg.Conf)
	opts.Addresses = cfg.Resolved.Addresses
	opts.User = cfg.User
	dial := timeoutDialer(cfg.RPCTimeout)
	opts.NamenodeDialFunc, opts.DatanodeDialFunc = dial, dial
	if allowed := dataTransferQOPs(cfg.Conf); opts.DataTransferProtection != "" && len(allowed) > 0 && !strings.EqualFold(cfg.Conf["dfs.encrypt.data.transfer"], "true") {
		// SASL on DataNode connections is ours (dtsasl), not the library's: its DIGEST-MD5 integrity and
		// confidentiality layers lose bytes on reads (see the dtsasl package doc).
		opts.DataTransferProtection = ""
		opts.DatanodeDialFunc = (&dtsasl.Dialer{Dial: dial, Allowed: allowed}).DialContext
	}
	opts.KerberosClient = nil
	var login krbLogin
	if cfg.Kerberos.Enabled {
		kc, l, err := kerberosClient(cfg.Kerberos)
		if err != nil {
			return nil, err
		}
		login = l
		opts.KerberosClient = kc
		if cfg.Kerberos.ServicePrincipal != "" {
			opts.KerberosServicePrincipleName = cfg.Kerberos.ServicePrincipal
		}
		if opts.KerberosServicePrincipleName == "" {
			return nil, errors.New("HDFS Kerberos: the NameNode principal is unknown; set dfs.namenode.kerberos.principal in hdfs-site.xml (HADOOP_CONF_DIR)")
		}
	}
	c, err := hdfs.NewClient(opts)
	if err != nil {
		return nil, authHint(cfg, login, wrap("connect", cfg.Resolved.String(), err))
	}
	nn, err := namenodeCallOf(c)
	if err != nil {
		// Without it Rename could only use the library's, which replaces an existing target.
		_ = c.Close()
		return nil, fmt.Errorf("HDFS %s: %w", cfg.Resolved, err)
	}
	cl := &Client{gen: &generation{c: c, nn: nn, ticketEnd: login.ticketEnd}, user: c.User(), timeout: cfg.RPCTimeout, stop: make(chan struct{}), ccache: login.ccache}
	if _, err := cl.Stat(ctx, "/"); err != nil {
		_ = c.Close()
		return nil, authHint(cfg, login, fmt.Errorf("HDFS %s (NameNodes %s): %w", cfg.Resolved, strings.Join(cfg.Resolved.Addresses, ","), err))
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if !login.ticketEnd.IsZero() {
		log.Info("HDFS Kerberos: logged in from a ticket cache; it is reread from shortly before the ticket ends (renew it with kinit -R or k5start; a keytab login renews itself)", "ccache", login.ccache, "expires", login.ticketEnd)
		reload := func(cc *credentials.CCache) error { return cl.reload(opts, login, cc) }
		cl.reloadCache = reload
		go watchTicket(log, login.ccache, login.ticketEnd, reload, time.Now, func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-cl.stop:
				return false
			}
		})
	}
	return cl, nil
}

// dataTransferQOPs are the SASL qops of dfs.data.transfer.protection (a list of authentication,
// integrity, privacy).
func dataTransferQOPs(conf hadoopconf.HadoopConf) []string {
	var out []string
	for _, v := range strings.Split(conf["dfs.data.transfer.protection"], ",") {
		if q := dtsasl.QOP(v); q != "" {
			out = append(out, q)
		}
	}
	return out
}

// krbLogin is how a Kerberos client logs in, for error messages.
type krbLogin struct {
	keytab, principal, ccache, krb5Conf string
	ticketEnd                           time.Time // a ticket-cache login: when the ticket it started with ends
}

// authHint names the fix when the first calls of a connection fail on authentication, so that a wrong
// or missing credential stops the mount with the flag or file to correct (it never connects without
// one: the library is given no other way to authenticate).
func authHint(cfg Config, l krbLogin, err error) error {
	msg := err.Error()
	switch {
	case cfg.Kerberos.Enabled && l.keytab != "" && strings.Contains(msg, "SASL handshake"):
		return fmt.Errorf("HDFS Kerberos: logging in as %s with the keytab %s failed: check --hdfs-keytab and --hdfs-principal (the keytab must hold that principal: klist -kt %s) and the realm's KDC in %s (KRB5_CONFIG): %w",
			l.principal, l.keytab, l.keytab, l.krb5Conf, err)
	case cfg.Kerberos.Enabled && strings.Contains(msg, "SASL handshake"):
		return fmt.Errorf("HDFS Kerberos: the ticket cache %s got no ticket for the NameNode: renew it with kinit (or give --hdfs-keytab and --hdfs-principal); KDC from %s (KRB5_CONFIG): %w",
			l.ccache, l.krb5Conf, err)
	case !cfg.Kerberos.Enabled && (strings.Contains(msg, "unexpected sequence number") || strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer")):
		// The NameNode answers a connection whose authentication it does not accept with a
		// connection-level error and closes it: the library reports a protocol error, or, when the
		// close wins the race with the request's write, the write's broken pipe or reset.
		return fmt.Errorf("HDFS: the NameNode dropped the connection of user %s with simple authentication before answering, as a cluster that requires Kerberos does: set hadoop.security.authentication=kerberos in core-site.xml (HADOOP_CONF_DIR) and give --hdfs-keytab and --hdfs-principal or a ticket cache (KRB5CCNAME): %w",
			cfg.User, err)
	}
	return err
}

func kerberosClient(k Kerberos) (*krb.Client, krbLogin, error) {
	confPath := k.Krb5Conf
	if confPath == "" {
		confPath = os.Getenv("KRB5_CONFIG")
	}
	if confPath == "" {
		confPath = "/etc/krb5.conf"
	}
	l := krbLogin{keytab: k.Keytab, principal: k.Principal, krb5Conf: confPath}
	kcfg, err := krbconfig.Load(confPath)
	if err != nil {
		return nil, l, fmt.Errorf("HDFS Kerberos: reading %s (set KRB5_CONFIG): %w", confPath, err)
	}
	if k.Keytab != "" {
		kt, err := keytab.Load(k.Keytab)
		if err != nil {
			return nil, l, fmt.Errorf("HDFS Kerberos: keytab %s: %w", k.Keytab, err)
		}
		name, realm, ok := strings.Cut(k.Principal, "@")
		if !ok || name == "" || realm == "" {
			return nil, l, fmt.Errorf("HDFS Kerberos: principal %q: want name@REALM (with the keytab %s)", k.Principal, k.Keytab)
		}
		return krb.NewWithKeytab(name, realm, kt, kcfg, krb.DisablePAFXFAST(true)), l, nil
	}
	cc := k.CCache
	if cc == "" {
		cc = os.Getenv("KRB5CCNAME")
	}
	if cc == "" {
		cc = fmt.Sprintf("/tmp/krb5cc_%d", os.Getuid())
	}
	cc = strings.TrimPrefix(cc, "FILE:")
	l.ccache = cc
	if i := strings.IndexByte(cc, ':'); i > 0 && !strings.Contains(cc[:i], "/") {
		return nil, l, fmt.Errorf("HDFS Kerberos: ticket cache %s: only file caches are read (kinit -c FILE:/path, then KRB5CCNAME=FILE:/path), or give --hdfs-keytab and --hdfs-principal", cc)
	}
	ccache, err := credentials.LoadCCache(cc)
	if err != nil {
		return nil, l, fmt.Errorf("HDFS Kerberos: ticket cache %s (run kinit, or give --hdfs-keytab and --hdfs-principal): %w", cc, err)
	}
	end, _, err := tgtTimes(ccache)
	if err != nil {
		return nil, l, fmt.Errorf("HDFS Kerberos: ticket cache %s (run kinit, or give --hdfs-keytab and --hdfs-principal): %w", cc, err)
	}
	if !time.Now().Before(end) {
		return nil, l, fmt.Errorf("HDFS Kerberos: ticket cache %s: %w (at %s): %s", cc, errTicketExpired, end.Format(time.RFC3339), ticketFix(cc))
	}
	l.ticketEnd = end
	l.principal = ccache.GetClientPrincipalName().PrincipalNameString() + "@" + ccache.GetClientRealm()
	kc, err := krb.NewFromCCache(ccache, kcfg, krb.DisablePAFXFAST(true))
	if err != nil {
		return nil, l, fmt.Errorf("HDFS Kerberos: ticket cache %s (run kinit, or give --hdfs-keytab and --hdfs-principal): %w", cc, err)
	}
	return kc, l, nil
}

// timeoutDialer dials with a timeout and returns connections whose every Read and Write must complete
// within d (the library has no contexts: this is what bounds a call to a hung NameNode).
func timeoutDialer(d time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: d, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &deadlineConn{Conn: c, d: d}, nil
	}
}

type deadlineConn struct {
	net.Conn
	d time.Duration
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.d))
	return c.Conn.Read(b)
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.d))
	return c.Conn.Write(b)
}

// Library returns the underlying library client (tests and tools that need a call FS does not have).
func (c *Client) Library() *hdfs.Client {
	c.genMu.RLock()
	defer c.genMu.RUnlock()
	return c.gen.c
}

// User is the HDFS user (the Kerberos principal's short name with Kerberos).
func (c *Client) User() string { return c.user }

// Close releases the connection and the leases of files still open for writing.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.stop != nil {
			close(c.stop) // before the current generation is read: a reload after this closes its own
		}
		c.genMu.RLock()
		g := c.gen
		c.genMu.RUnlock()
		err = g.c.Close()
	})
	return err
}

func toInfo(fi os.FileInfo) FileInfo {
	out := FileInfo{Name: fi.Name(), Size: fi.Size(), ModTime: fi.ModTime(), IsDir: fi.IsDir(), Mode: fi.Mode().Perm()}
	if h, ok := fi.(*hdfs.FileInfo); ok {
		out.Owner, out.Group = h.Owner(), h.OwnerGroup()
		if st, ok := h.Sys().(*hdfs.FileStatus); ok {
			out.Symlink = len(st.GetSymlink()) > 0
			out.ID = st.GetFileId()
		}
	}
	if out.IsDir {
		out.Size = 0
	}
	return out
}

func (c *Client) Stat(ctx context.Context, name string) (FileInfo, error) {
	g, err := c.begin(ctx, "stat", name)
	if err != nil {
		return FileInfo{}, err
	}
	defer g.release()
	fi, err := g.c.Stat(name)
	if err != nil {
		return FileInfo{}, wrap("stat", name, err)
	}
	out := toInfo(fi)
	if name == "/" {
		out.Name = ""
	}
	return out, nil
}

// listPage is the entries asked per Readdir: the NameNode's default dfs.ls.limit, so one page is
// one getListing RPC.
const listPage = 1000

func (c *Client) List(ctx context.Context, name string, fn func([]FileInfo) error) error {
	g, err := c.begin(ctx, "list", name)
	if err != nil {
		return err
	}
	defer g.release()
	d, err := g.c.Open(name)
	if err != nil {
		return wrap("list", name, err)
	}
	defer d.Close()
	if !d.Stat().IsDir() {
		return &Error{Op: "list", Path: name, Class: fs.ErrInvalid, Err: errors.New("not a directory")}
	}
	for {
		if err := ctx.Err(); err != nil {
			return wrap("list", name, err)
		}
		batch, err := d.Readdir(listPage)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return wrap("list", name, err)
		}
		page := make([]FileInfo, len(batch))
		for i, fi := range batch {
			page[i] = toInfo(fi)
		}
		if err := fn(page); err != nil {
			return err
		}
		if len(batch) < listPage {
			return nil
		}
	}
}

type reader struct {
	mu   sync.Mutex // the library's ReadAt seeks a shared position
	gen  *generation
	f    *hdfs.FileReader
	size int64
	name string
	d    time.Duration
}

func (r *reader) Size() int64 { return r.size }
func (r *reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == nil {
		return nil // closed already
	}
	defer r.gen.release()
	r.gen = nil
	return wrap("close", r.name, r.f.Close())
}

// ReadAt reads p at off and then lets go of the DataNode connection the read used: an open file holds
// none between its reads. Every connection is a transfer thread on the DataNode
// (dfs.datanode.max.transfer.threads, 4096 by default, each kept until the DataNode's 8-minute write
// timeout), so a mount holding one per open file let any user of an --allow-other mount open and read
// one byte of thousands of files and leave the checkpoints being written without transfer threads.
// It costs no reconnect the library would not make anyway: its ReadAt seeks first, and a seek, even to
// the offset it is at, closes the block reader (only a skip forward within the block keeps it).
func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.f.SetDeadline(time.Now().Add(r.d))
	n, err := r.f.ReadAt(p, off)
	r.dropBlockReader()
	if err != nil && err != io.EOF {
		return n, wrap("read", r.name, err)
	}
	return n, err
}

// dropBlockReader closes the file's DataNode connection, if it holds one, keeping its offset: a seek
// backwards cannot be served by skipping, so the library closes the block reader, and the seek back
// only sets the offset (the next read connects again). At offset 0 nothing was read, so nothing is held.
func (r *reader) dropBlockReader() {
	cur, err := r.f.Seek(0, io.SeekCurrent)
	if err != nil || cur == 0 {
		return
	}
	if _, err := r.f.Seek(-1, io.SeekCurrent); err == nil {
		_, _ = r.f.Seek(cur, io.SeekStart)
	}
}

func (c *Client) Open(ctx context.Context, name string) (Reader, error) {
	g, err := c.begin(ctx, "open", name)
	if err != nil {
		return nil, err
	}
	f, err := g.c.Open(name)
	if err != nil {
		g.release()
		return nil, wrap("open", name, err)
	}
	if f.Stat().IsDir() {
		f.Close()
		g.release()
		return nil, &Error{Op: "open", Path: name, Class: fs.ErrInvalid, Err: errors.New("is a directory")}
	}
	return &reader{gen: g, f: f, size: f.Stat().Size(), name: name, d: c.timeout}, nil
}

type writer struct {
	f    *hdfs.FileWriter
	name string

	mu  sync.Mutex
	gen *generation // released at the first Close that ends the file (or gives up on it)
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	return n, wrap("write", w.name, err)
}

func (w *writer) Close() error {
	err := w.f.Close()
	for i := 0; err != nil && hdfs.IsErrReplicating(err) && i < 10; i++ {
		// The last block is still being replicated: the library asks to retry the close.
		time.Sleep(time.Duration(i+1) * 100 * time.Millisecond)
		err = w.f.Close()
	}
	w.mu.Lock()
	if w.gen != nil {
		w.gen.release()
		w.gen = nil
	}
	w.mu.Unlock()
	return wrap("close", w.name, err)
}

func (c *Client) Create(ctx context.Context, name string, perm fs.FileMode) (Writer, error) {
	g, err := c.begin(ctx, "create", name)
	if err != nil {
		return nil, err
	}
	sd, err := g.c.ServerDefaults()
	if err != nil {
		g.release()
		return nil, wrap("create", name, err)
	}
	f, err := g.c.CreateFile(name, sd.Replication, sd.BlockSize, perm.Perm())
	if err != nil {
		g.release()
		return nil, wrap("create", name, err)
	}
	return &writer{f: f, name: name, gen: g}, nil
}

// Append reopens a completed file at its end: the library's append (the NameNode hands out the lease
// and the last block, which the writer continues).
func (c *Client) Append(ctx context.Context, name string) (Writer, error) {
	g, err := c.begin(ctx, "append", name)
	if err != nil {
		return nil, err
	}
	f, err := g.c.Append(name)
	if err != nil {
		g.release()
		return nil, wrap("append", name, err)
	}
	return &writer{f: f, name: name, gen: g}, nil
}

func (c *Client) Mkdir(ctx context.Context, name string, perm fs.FileMode) error {
	g, err := c.begin(ctx, "mkdir", name)
	if err != nil {
		return err
	}
	defer g.release()
	return wrap("mkdir", name, g.c.Mkdir(name, perm.Perm()))
}

func (c *Client) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	g, err := c.begin(ctx, "mkdir", name)
	if err != nil {
		return err
	}
	defer g.release()
	return wrap("mkdir", name, g.c.MkdirAll(name, perm.Perm()))
}

// Remove deletes one file or empty directory with one non-recursive delete RPC (deleteOne; the NameNode
// refuses a non-empty directory with PathIsNotEmptyDirectoryException).
func (c *Client) Remove(ctx context.Context, name string) error {
	g, err := c.begin(ctx, "remove", name)
	if err != nil {
		return err
	}
	defer g.release()
	// The NameNode's message names the cause (for a refusal: "Permission denied: user=…, access=WRITE").
	return wrap("remove", name, withRemoteMessage(deleteOne(g.nn, name)))
}

// Rename refuses an existing target at the NameNode: it sends rename2 with overwriteDest=false (the
// library's Rename always overwrites), so the check and the move are one namespace operation and a
// target created by another client at any moment is never replaced (FileAlreadyExistsException →
// fs.ErrExist). A directory target is refused the same way, empty or not.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	g, err := c.begin(ctx, "rename", from)
	if err != nil {
		return err
	}
	defer g.release()
	err = rename2(g.nn, from, to, false)
	if err == nil {
		return nil
	}
	class := classify(err)
	var re remoteError
	if class != fs.ErrExist && errors.As(err, &re) && re.Exception() == "java.io.IOException" {
		// The NameNode refuses a file onto a directory (or back) with a plain IOException before it
		// looks at overwriteDest; it moved nothing. An existing target is that refusal: EEXIST, as for
		// a file onto a file (the trash's suffix retry relies on it).
		if _, serr := g.c.Stat(to); serr == nil {
			class = fs.ErrExist
		}
	}
	err = withRemoteMessage(err)
	if class == fs.ErrExist {
		return &Error{Op: "rename", Path: to, Class: class, Err: fmt.Errorf("rename %s: target exists (never replaced): %w", from, err)}
	}
	return &Error{Op: "rename", Path: from, Class: class, Err: fmt.Errorf("to %s: %w", to, err)}
}

func (c *Client) Chtimes(ctx context.Context, name string, mtime time.Time) error {
	g, err := c.begin(ctx, "setTimes", name)
	if err != nil {
		return err
	}
	defer g.release()
	return wrap("setTimes", name, g.c.Chtimes(name, mtime, mtime))
}

// Defaults reads the NameNode's server defaults once.
func (c *Client) Defaults(ctx context.Context) (Defaults, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.defaults != nil {
		return *c.defaults, nil
	}
	g, err := c.begin(ctx, "getServerDefaults", "/")
	if err != nil {
		return Defaults{}, err
	}
	defer g.release()
	sd, err := g.c.ServerDefaults()
	if err != nil {
		return Defaults{}, wrap("getServerDefaults", "/", err)
	}
	c.defaults = &Defaults{TrashInterval: time.Duration(sd.TrashInterval) * time.Minute, Replication: sd.Replication}
	return *c.defaults, nil
}

// Join joins an absolute HDFS directory and a relative key.
func Join(dir, key string) string {
	if key == "" {
		return dir
	}
	return path.Join(dir, key)
}
