package hdfsclient

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"github.com/jcmturner/gokrb5/v8/iana/nametype"
	"github.com/jcmturner/gokrb5/v8/types"
)

// Renewal of Kerberos logins. gokrb5 renews the ticket-granting ticket of a keytab login itself (at
// 5/6 of its lifetime, and logs in again from the keytab once it can no longer be renewed). A client
// made from a ticket cache has no credential to log in with and starts no renewal, so a ticket-cache
// login is renewed from outside: `kinit -R` or k5start rewrite the cache file, and watchTicket rereads
// it from shortly before the ticket's end (Client.reload then makes the NameNode connections from the
// renewed ticket). When the file is not renewed in time the mount says so ahead of the end and at it,
// naming the cache and the fixes, so an expiry is never a silent run of EIOs.

// tgtTimes reads when the ticket-granting ticket of a ticket cache ends and until when it can be
// renewed.
func tgtTimes(cc *credentials.CCache) (end, renewTill time.Time, err error) {
	realm := cc.GetClientRealm()
	tgt, ok := cc.GetEntry(types.PrincipalName{NameType: nametype.KRB_NT_SRV_INST, NameString: []string{"krbtgt", realm}})
	if !ok {
		return time.Time{}, time.Time{}, fmt.Errorf("no ticket-granting ticket for the realm %q in the cache", realm)
	}
	return tgt.EndTime, tgt.RenewTill, nil
}

// ticketWarnLead is how long before the ticket's end the cache is first reread (and, not renewed, the
// first WARN comes): 15 minutes, or a sixth of the time left for a shorter ticket.
func ticketWarnLead(left time.Duration) time.Duration {
	return min(15*time.Minute, left/6)
}

// ticketPoll is how often the cache is reread from then on: every minute, a fifth of the lead for
// short tickets, never more often than every second.
func ticketPoll(lead time.Duration) time.Duration {
	return max(time.Second, min(time.Minute, lead/5))
}

// ticketFix is what to do about an expiring ticket-cache login, for the WARNs and errors.
func ticketFix(ccache string) string {
	return fmt.Sprintf("renew the cache (kinit -R, k5start, or kinit; the mount rereads it), or mount with --hdfs-keytab and --hdfs-principal (keytab logins renew themselves); KRB5CCNAME=%s", ccache)
}

// watchTicket follows a ticket-cache login whose ticket ends at end: from ticketWarnLead before the
// end it rereads the cache every ticketPoll; a ticket renewed there (a later end) is handed to reload,
// which makes it the client's. Not renewed, it WARNs once ahead of the end and once at it, and keeps
// rereading, so a renewal after the expiry still brings the mount back. sleep waits d and reports
// false when the watch is stopped.
func watchTicket(log *slog.Logger, ccache string, end time.Time, reload func(*credentials.CCache) error, now func() time.Time, sleep func(time.Duration) bool) {
	for {
		lead := ticketWarnLead(end.Sub(now()))
		poll := ticketPoll(lead)
		if wait := end.Sub(now()) - lead; wait > 0 && !sleep(wait) {
			return
		}
		warned, expired, lastErr := false, false, ""
		for {
			renewed, err := rereadTicket(ccache, end, reload)
			if err != nil && err.Error() != lastErr { // once per distinct failure, not every poll
				lastErr = err.Error()
				log.Warn("HDFS Kerberos: the renewed ticket cache could not be used; the mount keeps its ticket: "+ticketFix(ccache), "ccache", ccache, "expires", end, "err", err)
			}
			if !renewed.IsZero() {
				log.Info("HDFS Kerberos: reread the renewed ticket cache; new NameNode connections use its ticket", "ccache", ccache, "expires", renewed)
				end = renewed
				break
			}
			left := end.Sub(now())
			switch {
			case left > 0 && !warned:
				log.Warn("HDFS Kerberos: the ticket of the ticket cache the mount logged in with expires soon and the cache has not been renewed: "+ticketFix(ccache), "ccache", ccache, "expires", end)
				warned = true
			case left <= 0 && !expired:
				log.Warn("HDFS Kerberos: the ticket of the ticket cache the mount logged in with has expired: every NameNode call fails (EIO; deletions are refused) until the cache is renewed: "+ticketFix(ccache), "ccache", ccache, "expired", end)
				warned, expired = true, true
			}
			d := poll
			if left > 0 {
				d = min(poll, left) // the expiry WARN comes at the end, not up to a poll later
			}
			if !sleep(d) {
				return
			}
		}
	}
}

// rereadTicket reads the cache file; when its ticket ends later than end it is passed to reload and,
// reloaded, its end returned (zero otherwise). A cache that cannot be read counts as not renewed.
func rereadTicket(ccache string, end time.Time, reload func(*credentials.CCache) error) (time.Time, error) {
	cc, err := credentials.LoadCCache(ccache)
	if err != nil {
		return time.Time{}, nil
	}
	renewed, _, err := tgtTimes(cc)
	if err != nil || !renewed.After(end) {
		return time.Time{}, nil
	}
	if err := reload(cc); err != nil {
		return time.Time{}, err
	}
	return renewed, nil
}

// errTicketExpired: a ticket cache whose ticket-granting ticket has ended cannot log in.
var errTicketExpired = errors.New("the ticket has expired")
