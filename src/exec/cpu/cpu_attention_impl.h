/*
 * cpu_attention_impl.h - the fused attention kernels of cpu_attention.c for
 * one element type, included once per type with T (the C type), SUF (f32,
 * f64) and GEMM (cblas_sgemm, cblas_dgemm) defined. Written as a file
 * rather than a macro so that the tiled loops read as plain C.
 *
 * Forward, per (batch entry, block of MG_ATTN_BQ query rows): for each
 * block of MG_ATTN_BK keys, the scores tile s = q k^T * scale (+ mask) by
 * GEMM, the online softmax (running row maximum m and sum l; the output
 * rows accumulated so far are rescaled by exp(m_old - m_new)), dropout on
 * the weights, and o += p v by GEMM. At the end o /= l and the row's
 * log-sum-exp m + log l goes into column dv of y.
 *
 * Backward, per batch entry: for each key block, for each query block that
 * the causal mask leaves any weight in, the weights p = exp(s - lse) are
 * recomputed from the scores, dp = do v^T, ds = p * (dp - D) with
 * D = rowsum(do * o) - glse, and dv += p^T do, dq += scale ds k,
 * dk += scale ds^T q by GEMM (attention_grad_mask writes ds itself, the
 * mask's gradient before it is summed over broadcast dims). One task owns a
 * whole batch entry, so its sums run in one order whatever the thread count.
 */
#define AT_CAT2(a, b) a##_##b
#define AT_CAT(a, b) AT_CAT2(a, b)
#define AT_FN(name) AT_CAT(name, SUF)

/* Add the mask and apply the causal limit to the scores row of query gi
 * over keys [c0, c0 + nc): returns how many leading columns may carry
 * weight (the rest is masked by causality). */
static int AT_FN(attn_row_prep)(T *row, const T *mb, const mg_attn_dims *d,
                                int causal, int64_t gi, int64_t c0, int nc) {
    if (mb) {
        const T *mr = mb + gi * d->ms_r + c0 * d->ms_c;
        const int64_t sc = d->ms_c;
        for (int j = 0; j < nc; j++) row[j] += mr[j * sc];
    }
    if (!causal) return nc;
    const int64_t lim = gi - c0 + 1;
    return lim <= 0 ? 0 : lim < nc ? (int)lim : nc;
}

static void AT_FN(attn_fwd_task)(const T *q, const T *k, const T *v,
                                 const T *mask, T *y, const mg_attn_dims *d,
                                 const mg_attrs *at, uint64_t key, int64_t task,
                                 T *work) {
    const int64_t nqb = (d->lq + MG_ATTN_BQ - 1) / MG_ATTN_BQ;
    const int64_t b = task / nqb, r0 = (task % nqb) * MG_ATTN_BQ;
    const int nr = (int)(d->lq - r0 < MG_ATTN_BQ ? d->lq - r0 : MG_ATTN_BQ);
    const int64_t ldy = d->dv + 1, dv = d->dv, dd = d->d;
    const T *qb = q + (b * d->lq + r0) * dd, *kb = k + b * d->lk * dd,
            *vb = v + b * d->lk * dv;
    const T *mb = mask ? mask + mg_attn_mask_base(d, b) : NULL;
    T *o = y + (b * d->lq + r0) * ldy;
    T *s = work, *mx = work + MG_ATTN_BQ * MG_ATTN_BK, *l = mx + MG_ATTN_BQ;
    const T keep = (T)(1.0 / (1.0 - at->p));
    const int drop = at->p > 0;
    for (int i = 0; i < nr; i++) {
        mx[i] = -INFINITY;
        l[i] = 0;
        for (int64_t c = 0; c < ldy; c++) o[i * ldy + c] = 0;
    }
    const int64_t kend =
        at->causal && r0 + nr < d->lk ? r0 + nr : d->lk; /* keys j <= i */
    for (int64_t c0 = 0; c0 < kend; c0 += MG_ATTN_BK) {
        const int nc = (int)(kend - c0 < MG_ATTN_BK ? kend - c0 : MG_ATTN_BK);
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, (int)dd,
             (T)at->alpha, qb, (int)dd, kb + c0 * dd, (int)dd, 0, s,
             MG_ATTN_BK);
        for (int i = 0; i < nr; i++) {
            T *restrict row = s + i * MG_ATTN_BK;
            const int64_t gi = r0 + i;
            const int ncol =
                AT_FN(attn_row_prep)(row, mb, d, at->causal, gi, c0, nc);
            T mb_max = -INFINITY;
            for (int j = 0; j < ncol; j++)
                mb_max = row[j] > mb_max ? row[j] : mb_max;
            const T m_new = mb_max > mx[i] ? mb_max : mx[i];
            if (m_new == -INFINITY) { /* no weight in this row yet */
                for (int j = 0; j < nc; j++) row[j] = 0;
                continue;
            }
            const T alpha = exp(mx[i] - m_new);
            T sum = 0;
            AT_FN(attn_exp_shift)(row, ncol, m_new);
            for (int j = 0; j < ncol; j++) sum += row[j];
            for (int j = ncol; j < nc; j++) row[j] = 0;
            l[i] = l[i] * alpha + sum;
            if (alpha != 1)
                for (int64_t c = 0; c < dv; c++) o[i * ldy + c] *= alpha;
            mx[i] = m_new;
            if (drop) {
                const uint64_t base =
                    at->offset + (uint64_t)((b * d->lq + gi) * d->lk + c0);
                for (int j = 0; j < ncol; j++)
                    row[j] = mg_rng_uniform(mg_rng_hash(key, base + j)) >= at->p
                                 ? row[j] * keep
                                 : (T)0;
            }
        }
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, (int)dv, nc, 1, s,
             MG_ATTN_BK, vb + c0 * dv, (int)dv, 1, o, (int)ldy);
    }
    for (int i = 0; i < nr; i++) {
        for (int64_t c = 0; c < dv; c++) o[i * ldy + c] /= l[i];
        o[i * ldy + dv] = mx[i] + log(l[i]);
    }
}

/* With dmask, the scores' gradient ds of batch entry b goes to g + b * Lq
 * * Lk (attention_grad_mask) instead of dq, dk and dv. */
static void AT_FN(attn_bwd_task)(const T *q, const T *k, const T *v, const T *y,
                                 const T *gy, const T *mask, T *g,
                                 const mg_attn_dims *d, const mg_attrs *at,
                                 uint64_t key, int64_t b, T *work, int dmask) {
    const int64_t ldy = d->dv + 1, dv = d->dv, dd = d->d, lq = d->lq,
                  lk = d->lk;
    const T *qb = q + b * lq * dd, *kb = k + b * lk * dd, *vb = v + b * lk * dv;
    const T *yb = y + b * lq * ldy, *gyb = gy + b * lq * ldy;
    const T *mb = mask ? mask + mg_attn_mask_base(d, b) : NULL;
    T *dq = g + b * (lq * dd + lk * dd + lk * dv), *dk = dq + lq * dd,
      *dvo = dk + lk * dd, *dso = g + b * lq * lk;
    T *s = work, *dp = s + MG_ATTN_BQ * MG_ATTN_BK,
      *D = dp + MG_ATTN_BQ * MG_ATTN_BK;
    const T keep = (T)(1.0 / (1.0 - at->p));
    const int drop = at->p > 0;
    const T scale = (T)at->alpha;
    if (dmask)
        for (int64_t e = 0; e < lq * lk; e++) dso[e] = 0;
    else
        for (int64_t e = 0; e < lq * dd + lk * dd + lk * dv; e++) dq[e] = 0;
    for (int64_t i = 0; i < lq; i++) {
        const T *gr = gyb + i * ldy, *yr = yb + i * ldy;
        T acc = 0;
        for (int64_t c = 0; c < dv; c++) acc += gr[c] * yr[c];
        D[i] = acc - gr[dv];
    }
    for (int64_t c0 = 0; c0 < lk; c0 += MG_ATTN_BK) {
        const int nc = (int)(lk - c0 < MG_ATTN_BK ? lk - c0 : MG_ATTN_BK);
        const int64_t rstart = at->causal ? c0 / MG_ATTN_BQ * MG_ATTN_BQ : 0;
        for (int64_t r0 = rstart; r0 < lq; r0 += MG_ATTN_BQ) {
            const int nr = (int)(lq - r0 < MG_ATTN_BQ ? lq - r0 : MG_ATTN_BQ);
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, (int)dd,
                 scale, qb + r0 * dd, (int)dd, kb + c0 * dd, (int)dd, 0, s,
                 MG_ATTN_BK);
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, (int)dv, 1,
                 gyb + r0 * ldy, (int)ldy, vb + c0 * dv, (int)dv, 0, dp,
                 MG_ATTN_BK);
            for (int i = 0; i < nr; i++) {
                T *restrict row = s + i * MG_ATTN_BK, *restrict prow =
                                                          dp + i * MG_ATTN_BK;
                const int64_t gi = r0 + i;
                const int ncol =
                    AT_FN(attn_row_prep)(row, mb, d, at->causal, gi, c0, nc);
                const T lse = yb[gi * ldy + dv], Di = D[gi];
                AT_FN(attn_exp_shift)(row, ncol, lse); /* row[j] = p */
                if (drop) {
                    const uint64_t base =
                        at->offset + (uint64_t)((b * lq + gi) * lk + c0);
                    for (int j = 0; j < ncol; j++) {
                        const T p = row[j];
                        const int kept =
                            mg_rng_uniform(mg_rng_hash(key, base + j)) >= at->p;
                        prow[j] = p * ((kept ? prow[j] * keep : (T)0) - Di);
                        row[j] = kept ? p * keep : (T)0;
                    }
                } else {
                    for (int j = 0; j < ncol; j++) {
                        const T p = row[j];
                        prow[j] = p * (prow[j] - Di);
                        row[j] = p;
                    }
                }
                for (int j = ncol; j < nc; j++) row[j] = prow[j] = 0;
                if (dmask)
                    for (int j = 0; j < nc; j++)
                        dso[gi * lk + c0 + j] = prow[j];
            }
            if (dmask) continue;
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nc, (int)dv, nr, 1, s,
                 MG_ATTN_BK, gyb + r0 * ldy, (int)ldy, 1, dvo + c0 * dv,
                 (int)dv);
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, (int)dd, nc,
                 scale, dp, MG_ATTN_BK, kb + c0 * dd, (int)dd, 1, dq + r0 * dd,
                 (int)dd);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, nc, (int)dd, nr,
                 scale, dp, MG_ATTN_BK, qb + r0 * dd, (int)dd, 1, dk + c0 * dd,
                 (int)dd);
        }
    }
}

/* Runs the tasks, each on one slot of the workspace: in parallel where
 * mgi_cpu_par says it pays (a thread per slot at most), else in order. */
static mg_status AT_FN(attn_run)(const mg_kargs *ka, const mg_attn_dims *d,
                                 int grad) {
    const int64_t tasks = mg_attn_tasks(d->batch, d->lq, grad);
    const int64_t slots = mg_attn_slots(tasks);
    const int64_t per = mg_attn_slot_elems(d->lq, grad);
    if (ka->work_bytes < (size_t)(slots * per) * sizeof(T) || !ka->work)
        return mg_kernel_fail(ka, MG_ERR_INVALID_ARG,
                              "attention was lent %zu workspace bytes, needs "
                              "%zu",
                              ka->work_bytes,
                              (size_t)(slots * per) * sizeof(T));
    const mg_attrs *at = ka->attrs;
    const uint64_t key = mg_rng_key(ka->run_seed, at->seed);
    const T *q = ka->in[0].data, *k = ka->in[1].data, *v = ka->in[2].data;
    const T *mask = d->has_mask ? ka->in[grad ? 5 : 3].data : NULL;
    T *work = ka->work, *out = ka->out.data;
    const double pairs = (double)d->batch * (double)d->lq * (double)d->lk;
#ifdef _OPENMP
    if (tasks > 1 && mgi_cpu_par(pairs > 1e15 ? INT64_MAX : (int64_t)pairs)) {
        int nt = omp_get_max_threads();
        if (nt > slots) nt = (int)slots;
#pragma omp parallel num_threads(nt)
        {
            T *w = work + (int64_t)omp_get_thread_num() * per;
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < tasks; t++) {
                if (grad) AT_FN(attn_bwd_task)
                (q, k, v, ka->in[3].data, ka->in[4].data, mask, out, d, at, key,
                 t, w, grad == 2);
                else AT_FN(attn_fwd_task)(q, k, v, mask, out, d, at, key, t, w);
            }
        }
        return MG_OK;
    }
#endif
    for (int64_t t = 0; t < tasks; t++) {
        if (grad) AT_FN(attn_bwd_task)
        (q, k, v, ka->in[3].data, ka->in[4].data, mask, out, d, at, key, t,
         work, grad == 2);
        else AT_FN(attn_fwd_task)(q, k, v, mask, out, d, at, key, t, work); }
    return MG_OK;
}

#undef AT_FN
#undef AT_CAT
#undef AT_CAT2
