package hdfsclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	hdfs "github.com/colinmarc/hdfs/v2"
	krb "github.com/jcmturner/gokrb5/v8/client"
	krbconfig "github.com/jcmturner/gokrb5/v8/config"
	"github.com/jcmturner/gokrb5/v8/credentials"
)

// generation is one library client and its NameNode connection. A ticket-cache login swaps in a new
// generation made from the renewed cache (reload); the one it replaces is retired and closed once the
// last call or open file made through it is done, so a file being written keeps its lease and
// connection to the end and no connection of an old ticket lingers.
type generation struct {
	c  *hdfs.Client
	nn namenodeCall
	// ticketEnd is when the ticket-granting ticket of a ticket-cache login's generation ends (zero for
	// a keytab login or simple authentication, which need no outside renewal).
	ticketEnd time.Time

	mu      sync.Mutex
	refs    int
	retired bool
}

// acquire returns the current generation, held until release: a retired generation is not closed
// while held. A ticket-cache generation whose ticket has ended is refused (op and name for the error)
// before any call: its NameNode connection may still be open, and the NameNode accepts tickets within
// the Kerberos clock skew, but a login whose ticket ran out is not acted on, so after the expiry every
// call, deletions among them, fails the same way (EIO, naming the cache and the fix) until the renewed
// cache is reloaded.
func (c *Client) acquire(op, name string) (*generation, error) {
	c.genMu.RLock()
	defer c.genMu.RUnlock()
	g := c.gen
	if !g.ticketEnd.IsZero() && !c.clock().Before(g.ticketEnd) {
		return nil, &Error{Op: op, Path: name, Class: ErrUnavailable,
			Err: fmt.Errorf("HDFS Kerberos: %w (at %s) and the ticket cache has not been renewed: no NameNode call is made: %s", errTicketExpired, g.ticketEnd.Format(time.RFC3339), ticketFix(c.ccache))}
	}
	g.mu.Lock()
	g.refs++
	g.mu.Unlock()
	return g, nil
}

// begin is how every NameNode call starts: a ctx already done fails it (op on name) before anything
// is sent, else it acquires the current generation, held until release.
func (c *Client) begin(ctx context.Context, op, name string) (*generation, error) {
	if err := ctx.Err(); err != nil {
		return nil, wrap(op, name, err)
	}
	return c.acquire(op, name)
}

// clock is the client's time (tests set now).
func (c *Client) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

func (g *generation) release() {
	g.mu.Lock()
	g.refs--
	last := g.retired && g.refs == 0
	g.mu.Unlock()
	if last {
		_ = g.c.Close()
	}
}

func (g *generation) retire() {
	g.mu.Lock()
	g.retired = true
	last := g.refs == 0
	g.mu.Unlock()
	if last {
		_ = g.c.Close()
	}
}

// reload makes a new library client from the renewed ticket cache cc and makes it current, once it has
// answered a call. The cache must still be of the principal the client logged in as: a cache rewritten
// by a kinit as someone else is refused (the mount never changes whom it acts as).
func (c *Client) reload(opts hdfs.ClientOptions, l krbLogin, cc *credentials.CCache) error {
	if got := cc.GetClientPrincipalName().PrincipalNameString() + "@" + cc.GetClientRealm(); got != l.principal {
		return fmt.Errorf("the ticket cache %s now holds %s, not %s the mount logged in as: not used; restart the mount to change the principal", l.ccache, got, l.principal)
	}
	kcfg, err := krbconfig.Load(l.krb5Conf)
	if err != nil {
		return fmt.Errorf("reading %s (KRB5_CONFIG): %w", l.krb5Conf, err)
	}
	end, _, err := tgtTimes(cc)
	if err != nil {
		return fmt.Errorf("ticket cache %s: %w", l.ccache, err)
	}
	kc, err := krb.NewFromCCache(cc, kcfg, krb.DisablePAFXFAST(true))
	if err != nil {
		return fmt.Errorf("ticket cache %s: %w", l.ccache, err)
	}
	opts.KerberosClient = kc
	lc, err := hdfs.NewClient(opts)
	if err != nil {
		return wrap("connect", "/", err)
	}
	nn, err := namenodeCallOf(lc)
	if err != nil {
		_ = lc.Close()
		return err
	}
	if _, err := lc.Stat("/"); err != nil {
		_ = lc.Close()
		return wrap("stat", "/", err)
	}
	c.genMu.Lock()
	select {
	case <-c.stop:
		c.genMu.Unlock()
		_ = lc.Close()
		return errors.New("the client is closed")
	default:
	}
	old := c.gen
	c.gen = &generation{c: lc, nn: nn, ticketEnd: end}
	c.genMu.Unlock()
	old.retire()
	return nil
}
