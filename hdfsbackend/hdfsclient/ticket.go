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

// A ticket-cache login is not renewed: gokrb5 renews the ticket-granting ticket of a keytab login
// itself (at 5/6 of its lifetime, then logs in again from the keytab once it can no longer be
// renewed), but a client made from a ticket cache has no credential to log in with and starts no
// renewal, and the library holds that one client for every NameNode connection. An external renewal
// of the cache file (kinit -R, k5start) is therefore not seen by a running mount. What the mount
// does instead is say so ahead of time and when it happens, naming the cache and the fixes, so an
// expiry is never a silent run of EIOs.

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

// ticketWarnLead is how long before the ticket's end the first WARN comes: 15 minutes, or a sixth of
// the time left for a shorter ticket.
func ticketWarnLead(left time.Duration) time.Duration {
	return min(15*time.Minute, left/6)
}

// ticketFix is what to do about an expiring ticket-cache login, for the WARNs and errors.
func ticketFix(ccache string) string {
	return fmt.Sprintf("renew the cache (kinit -R, or kinit) and restart the mount, or mount with --hdfs-keytab and --hdfs-principal (keytab logins renew themselves); KRB5CCNAME=%s", ccache)
}

// watchTicket logs a WARN when the ticket-cache login's ticket nears its end and one when it has
// expired; it re-reads the cache file at the first to say whether it was renewed outside (which the
// running mount still does not use). sleep waits d and reports false when the watch is stopped.
func watchTicket(log *slog.Logger, ccache string, end time.Time, now func() time.Time, sleep func(time.Duration) bool) {
	if lead := ticketWarnLead(end.Sub(now())); lead > 0 {
		if !sleep(end.Sub(now()) - lead) {
			return
		}
		msg, args := "HDFS Kerberos: the ticket of the ticket cache the mount logged in with expires soon and the mount does not renew it: "+ticketFix(ccache), []any{"ccache", ccache, "expires", end}
		if cc, err := credentials.LoadCCache(ccache); err != nil {
			args = append(args, "cache_reread_error", err)
		} else if renewed, _, err := tgtTimes(cc); err == nil && renewed.After(end) {
			msg = "HDFS Kerberos: the ticket cache was renewed outside the mount, but the mount keeps the ticket it logged in with and does not reread the cache: restart the mount before it expires, or mount with --hdfs-keytab and --hdfs-principal (keytab logins renew themselves)"
			args = append(args, "cache_valid_until", renewed)
		}
		log.Warn(msg, args...)
	}
	if left := end.Sub(now()); left > 0 && !sleep(left) {
		return
	}
	log.Warn("HDFS Kerberos: the ticket of the ticket cache the mount logged in with has expired: NameNode calls on new connections fail (EIO; deletions are refused) until the mount is restarted with a valid ticket: "+ticketFix(ccache), "ccache", ccache, "expired", end)
}

// errTicketExpired: a ticket cache whose ticket-granting ticket has ended cannot log in.
var errTicketExpired = errors.New("the ticket has expired")
