package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Placing an order: validation, the per-SKU cap, one attempt per key, the
// sold-out fast path, the pre-check, the strategy's write, and the answer to a
// replay, a sold-out or a duplicate.

// ValidKey reports whether s is a valid Idempotency-Key or SKU: 1-64 of
// [A-Za-z0-9._:-]. A byte loop, not a regexp: every order checks two.
func ValidKey(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// PlaceRequest is one order request.
type PlaceRequest struct {
	Buyer    string // the authenticated buyer (the token's sub)
	Key      string
	SKU      string
	Quantity int
}

// Hash identifies the request's content, so a replay can be told from a
// reuse of its key.
func (r PlaceRequest) Hash() string {
	sum := sha256.Sum256([]byte(r.SKU + "\x00" + strconv.Itoa(r.Quantity)))
	return hex.EncodeToString(sum[:])
}

// Validate returns an error wrapping ErrInvalid naming the bad field.
func (s *Service) Validate(r PlaceRequest) error {
	switch {
	case r.Buyer == "" || len(r.Buyer) > MaxBuyerLen:
		return fmt.Errorf("%w: the buyer must be 1-%d bytes", ErrInvalid, MaxBuyerLen)
	case !ValidKey(r.Key):
		return fmt.Errorf("%w: Idempotency-Key must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case !ValidKey(r.SKU):
		return fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case r.Quantity < 1 || r.Quantity > s.cfg.MaxQuantity:
		return fmt.Errorf("%w: quantity must be an integer from 1 to %d", ErrInvalid, s.cfg.MaxQuantity)
	}
	return nil
}

// Place places an order, or returns the order already placed with the same
// key and request (replayed = true). Errors: ErrInvalid, ErrUnknownSKU,
// ErrSoldOut, ErrLimitExceeded, ErrUnpaidLimit, a *SaleClosedError (ErrSaleNotStarted,
// ErrSaleEnded), ErrKeyReused, ErrBusy, ErrLockLost, ErrUnavailable.
func (s *Service) Place(ctx context.Context, r PlaceRequest) (o Order, replayed bool, err error) {
	ctx, span := s.trace.span(ctx, "stock.place")
	defer func() {
		result := orderResult(replayed, err)
		s.metrics.Order(result)
		endSpan(span, result, err)
	}()
	if span.IsRecording() {
		span.SetAttributes(attrStrategy.String(string(s.cfg.Strategy)))
	}
	if err := s.Validate(r); err != nil {
		return Order{}, false, err
	}
	if span.IsRecording() { // a valid SKU; the buyer and the key stay out of traces
		span.SetAttributes(attrSKU.String(r.SKU), attrQuantity.Int(r.Quantity))
	}
	// What this instance knew of the SKU's restocks before the order came:
	// a restock after it makes the store refuse the order (restocked.go).
	admitted := s.seqs.known(r.SKU)
	leave, err := s.enter(ctx, r)
	if err != nil {
		return Order{}, false, err
	}
	defer leave()
	if o, replayed, answered, err := s.answerFromPrecheck(ctx, r); answered {
		return o, replayed, err
	}
	hash := r.Hash()
	d := Deduction{Buyer: r.Buyer, Key: r.Key, RequestHash: hash, SKU: r.SKU, Quantity: r.Quantity, Admitted: &admitted}
	o, err = s.write(ctx, d)
	for range 2 {
		if !errors.Is(err, errQueuedPastSoldOut) {
			break
		}
		// Answered as a new order on the fast path would be; stock found
		// again (a restock) sends it the usual way once more.
		if o, replayed, answered, err := s.answerFromPrecheck(ctx, r); answered {
			return o, replayed, err
		}
		o, err = s.write(ctx, d)
	}
	if errors.Is(err, errQueuedPastSoldOut) { // the SKU flapped: the client may retry
		err = fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if err != nil {
		return s.answerRefusal(ctx, r, hash, err)
	}
	return o, false, nil
}

// enter admits the order: the per-SKU cap first, before any work (past
// QueueMax requests of this SKU here, ErrBusy at once; the locking
// strategies only: the others have no queue, and MySQL's pool bounds them),
// then one attempt per key at a time in this instance: a retry whose first
// attempt is still in the queue waits for it, so it is never told "sold out"
// while that attempt can still be placed. leave ends both.
func (s *Service) enter(ctx context.Context, r PlaceRequest) (leave func(), err error) {
	capped := s.info.UsesLock
	if capped && !s.queues.Admit(r.SKU, s.cfg.QueueMax) {
		return nil, errQueueFull(s.cfg.QueueMax)
	}
	done, err := s.flights.begin(ctx, r.Buyer+"\x00"+r.Key)
	if err != nil {
		if capped {
			s.queues.Release(r.SKU)
		}
		return nil, err
	}
	return func() {
		done()
		if capped {
			s.queues.Release(r.SKU)
		}
	}, nil
}

// answerFromPrecheck answers the order from the pre-check read when that
// decides it (answered): a replay, or sold out, which must not queue behind
// the lock. The read is skipped when the batch reads for its orders
// (skipsPrecheck), unless the SKU is on the sold-out fast path, whose
// orders' reads are combined. The stock row and the key's order come from
// one snapshot: an order of this key committed before the read is always
// seen, so a retry whose first attempt took the last unit gets its order
// back, not a 409.
func (s *Service) answerFromPrecheck(ctx context.Context, r PlaceRequest) (o Order, replayed, answered bool, err error) {
	fast := s.soldOut.known(r.SKU)
	if !fast && s.skipsPrecheck() {
		return Order{}, false, false, nil
	}
	st, prev, err := s.precheck(ctx, r, fast)
	if err != nil {
		return Order{}, false, true, err
	}
	s.seqs.learn(r.SKU, st.RestockSeq)
	if prev != nil {
		o, replayed, err := replay(*prev, r.Hash())
		return o, replayed, true, err
	}
	if st.Available < int64(r.Quantity) {
		s.soldOut.mark(r.SKU)
		return Order{}, false, true, ErrSoldOut
	}
	s.soldOut.drop(r.SKU) // stock again: a restock not heard of yet
	return Order{}, false, false, nil
}

// write places d by the strategy's write path.
func (s *Service) write(ctx context.Context, d Deduction) (Order, error) {
	if s.info.place == nil {
		return Order{}, fmt.Errorf("service: strategy %q not implemented", s.cfg.Strategy)
	}
	return s.info.place(s, ctx, d)
}

// answerRefusal answers a write that failed. A duplicate key means a
// concurrent request with the same key won the insert; sold out, over the
// limit or the unpaid cap, outside the sale's schedule (a key placed before the end stays
// replayable after it) or restocked since the order came may mean an earlier attempt of
// this key took the last unit or allowance and committed while this one
// waited, or before it (the batch path has no pre-check). So the key is
// looked up, with a bound of its own (the write's may have run out while
// the order waited in the queue): its order is the answer if it has one.
func (s *Service) answerRefusal(ctx context.Context, r PlaceRequest, hash string, err error) (Order, bool, error) {
	var restocked *RestockedError
	if errors.As(err, &restocked) {
		s.seqs.learn(r.SKU, restocked.Seq)
	}
	closed := saleClosed(err)
	if restocked == nil && !closed && !errors.Is(err, ErrDuplicateKey) && !errors.Is(err, ErrSoldOut) && !refusedForBuyer(err) {
		return Order{}, false, err
	}
	if errors.Is(err, errSoldOutKeyRead) { // the key was read with the row that said so
		s.soldOut.mark(r.SKU)
		return Order{}, false, ErrSoldOut
	}
	if errors.Is(err, ErrSoldOut) && s.soldOut != nil {
		return s.answerSoldOut(ctx, r, hash)
	}
	lctx, cancel := writeCtx(ctx, s.cfg.WriteTimeout)
	defer cancel()
	existing, ferr := s.store.OrderByKey(lctx, r.Buyer, r.Key)
	switch {
	case ferr == nil:
		return replay(existing, hash)
	case !errors.Is(ferr, ErrOrderNotFound):
		return Order{}, false, ferr
	case errors.Is(err, ErrSoldOut):
		s.soldOut.mark(r.SKU)
		return Order{}, false, ErrSoldOut
	case restocked != nil || closed || refusedForBuyer(err):
		return Order{}, false, err
	}
	// The key's other order was rolled back after all: retryable.
	return Order{}, false, fmt.Errorf("%w: a concurrent request with this key did not finish", ErrBusy)
}

// refusedForBuyer reports whether err refuses an order for what its buyer
// holds: the per-buyer limit or the unpaid cap.
func refusedForBuyer(err error) bool {
	return errors.Is(err, ErrLimitExceeded) || errors.Is(err, ErrUnpaidLimit)
}

// answerSoldOut answers a write refused as sold out from a read of its key
// shared with the SKU's other orders on the sold-out fast path (one
// statement for many keys: a queue of orders refused at once costs a few
// reads, not one each): the key's order if an earlier attempt placed it,
// sold out otherwise.
func (s *Service) answerSoldOut(ctx context.Context, r PlaceRequest, hash string) (Order, bool, error) {
	lctx, cancel := writeCtx(ctx, s.cfg.WriteTimeout)
	defer cancel()
	st, prev, err := s.soldOut.check(lctx, s.store, r.SKU, BuyerKey{Buyer: r.Buyer, Key: r.Key})
	switch {
	case err != nil:
		return Order{}, false, err
	case prev != nil:
		return replay(*prev, hash)
	}
	if st.Available < int64(r.Quantity) {
		s.soldOut.mark(r.SKU)
	}
	return Order{}, false, ErrSoldOut
}

// precheck reads the SKU's stock row and the order of the request's key:
// on the sold-out fast path in a read shared with the SKU's other orders
// there, alone otherwise.
func (s *Service) precheck(ctx context.Context, r PlaceRequest, fast bool) (Stock, *Order, error) {
	if fast {
		return s.soldOut.check(ctx, s.store, r.SKU, BuyerKey{Buyer: r.Buyer, Key: r.Key})
	}
	return s.store.Precheck(ctx, r.SKU, r.Buyer, r.Key)
}

// skipsPrecheck reports whether the order skips the pre-check read and goes
// straight to the queue: under combined lock+version the batch reads its
// keys itself before the lock, and the stock row under it (one read each
// for up to BatchMax orders instead of one per order), a key with an order
// is answered as a replay, and sold-out traffic is kept out of the queue by
// the sold-out fast path, learnt from the first sold-out answer. Without
// the fast path the pre-check keeps sold-out traffic out. Under the
// counter strategies the counter keeps it out (counter.go).
func (s *Service) skipsPrecheck() bool {
	return s.cfg.Strategy == StrategyLockVersion && s.cfg.BatchMax > 1 && s.soldOut != nil || s.info.Counted
}

func replay(o Order, hash string) (Order, bool, error) {
	if o.RequestHash != hash {
		return Order{}, false, ErrKeyReused
	}
	return o, true, nil
}

func orderResult(replayed bool, err error) string {
	switch {
	case err == nil && replayed:
		return "replayed"
	case err == nil:
		return "created"
	case errors.Is(err, ErrSoldOut):
		return "sold_out"
	case errors.Is(err, ErrLimitExceeded):
		return "limit_exceeded"
	case errors.Is(err, ErrUnpaidLimit):
		return "unpaid_limit"
	case saleClosed(err):
		return "sale_closed"
	case errors.Is(err, ErrBusy), errors.Is(err, ErrInProgress):
		return "busy"
	case errors.Is(err, ErrLockLost):
		return "lock_lost"
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrKeyReused), errors.Is(err, ErrUnknownSKU):
		return "rejected"
	}
	return "error"
}

// MaxBuyerLen bounds a buyer id (a token's sub).
const MaxBuyerLen = 128
