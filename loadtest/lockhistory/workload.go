package lockhistory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/seckill/stock/internal/service"
)

// Fencing is how the register treats the writers' fencing tokens.
type Fencing int

const (
	// Unfenced writes with a plain UPDATE of the value.
	Unfenced Fencing = iota
	// FencedWrite writes with UPDATE ... WHERE last_fence < ?: refused when a write
	// with a newer fence has landed.
	FencedWrite
	// FencedReadWrite fences the read too: it first raises last_fence to
	// the reader's fence, and the write needs last_fence <= its own, so it
	// is refused when a newer holder has read, not only written.
	FencedReadWrite
)

func (f Fencing) String() string {
	return [...]string{"unfenced", "fenced write", "fenced read and write"}[f]
}

// Register is one row of the MySQL table lock_register: the shared state
// the lock guards. DB must count the rows a write matched, not the rows it
// changed (clientFoundRows=true in the DSN): a fenced write that matched
// and changed nothing was still taken.
type Register struct {
	DB      *sql.DB
	Name    string // the row's key; Reset makes it
	Fencing Fencing
}

// Reset makes the register (the table if need be) at value 0, fence 0.
func (r Register) Reset(ctx context.Context) error {
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS lock_register (name VARCHAR(64) PRIMARY KEY, value BIGINT NOT NULL, last_fence BIGINT NOT NULL)",
		"REPLACE INTO lock_register VALUES (?, 0, 0)",
	} {
		var args []any
		if strings.Contains(q, "?") {
			args = append(args, r.Name)
		}
		if _, err := r.DB.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("register: %w", err)
		}
	}
	return nil
}

// Read returns the value (raising last_fence to fence first, when reads
// are fenced).
func (r Register) Read(ctx context.Context, fence int64) (int64, error) {
	if r.Fencing == FencedReadWrite {
		if _, err := r.DB.ExecContext(ctx, "UPDATE lock_register SET last_fence = GREATEST(last_fence, ?) WHERE name = ?", fence, r.Name); err != nil {
			return 0, err
		}
	}
	var v int64
	err := r.DB.QueryRowContext(ctx, "SELECT value FROM lock_register WHERE name = ?", r.Name).Scan(&v)
	return v, err
}

// Write writes v under fence and reports whether the register took it.
func (r Register) Write(ctx context.Context, v, fence int64) (bool, error) {
	q, args := "UPDATE lock_register SET value = ?, last_fence = GREATEST(last_fence, ?) WHERE name = ?", []any{v, fence, r.Name}
	switch r.Fencing {
	case FencedWrite:
		q, args = "UPDATE lock_register SET value = ?, last_fence = ? WHERE name = ? AND last_fence < ?", []any{v, fence, r.Name, fence}
	case FencedReadWrite:
		q, args = "UPDATE lock_register SET value = ?, last_fence = ? WHERE name = ? AND last_fence <= ?", []any{v, fence, r.Name, fence}
	}
	res, err := r.DB.ExecContext(ctx, q, args...)
	if err != nil || r.Fencing == Unfenced {
		return err == nil, err // a blind write lands, even when it changes nothing
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Workload is the lock workload: every client takes the lock of SKU on its
// own Locker, reads the register, waits Hold, writes the value + 1 and
// releases, Ops times (the others more, while client 0 is not done). The clients do not look at the hold before they
// write (a paused process would not either): what keeps the register
// right is the lock alone, or the fence.
type Workload struct {
	Lockers  []service.Locker // one per client
	Register Register
	SKU      string
	Ops      int           // per client
	Hold     time.Duration // between the read and the write
	Wait     time.Duration // TryLock's wait
	Lease    time.Duration // TryLock's lease (0: the gate's own)
	// Fault, if set, runs inside client's i-th critical section between the
	// read and the write; it may sleep past the lease, cut a link, delete
	// the lock's key.
	Fault func(client, i int, h service.Hold)
}

// Run runs the workload and returns every critical section it completed
// (lock waits that ran out are retried, not recorded). The first error of
// a read, or of a lock call that is not a timeout, ends the run.
func (w Workload) Run(ctx context.Context) ([]Op, error) {
	var (
		mu   sync.Mutex
		ops  []Op
		errs []error
		wg   sync.WaitGroup
	)
	first := make(chan struct{}) // closed when client 0 is done
	for c, l := range w.Lockers {
		wg.Go(func() {
			if c == 0 {
				defer close(first)
			}
			for i := 0; w.more(c, i, first) && ctx.Err() == nil; {
				op, err := w.section(ctx, l, c, i)
				if errors.Is(err, service.ErrLockNotObtained) {
					continue
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("client %d op %d: %w", c, i, err))
				} else {
					ops = append(ops, op)
				}
				mu.Unlock()
				if err != nil {
					return
				}
				i++
			}
		})
	}
	wg.Wait()
	return ops, errors.Join(errs...)
}

// more reports whether client c goes on to its i-th section: Ops of
// them, and the others go on (up to 20 times Ops) until client 0, which
// meets the fault, is done, so that its late write has someone to race.
func (w Workload) more(c, i int, first <-chan struct{}) bool {
	if i < w.Ops {
		return true
	}
	select {
	case <-first:
		return false
	default:
		return c != 0 && i < 20*w.Ops
	}
}

// section is one critical section of client c.
func (w Workload) section(ctx context.Context, l service.Locker, c, i int) (Op, error) {
	h, err := l.TryLock(ctx, w.SKU, w.Wait, w.Lease)
	if err != nil {
		return Op{}, err
	}
	defer func() { _ = h.Unlock(context.WithoutCancel(ctx)) }()
	op := Op{Client: c, Fence: h.Fence(), Call: time.Now()}
	if op.Read, err = w.Register.Read(ctx, op.Fence); err != nil {
		return Op{}, err
	}
	time.Sleep(w.Hold)
	if w.Fault != nil {
		w.Fault(c, i, h)
	}
	op.Wrote = op.Read + 1
	applied, err := w.Register.Write(ctx, op.Wrote, op.Fence)
	op.Return = time.Now()
	switch {
	case err != nil:
		op.Outcome = Unknown
	case !applied:
		op.Outcome = Refused
	}
	return op, nil
}
