/*
 * ops/matmul.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * matmul: 2-D, transposed, batched and shared operands against hand values and
 * a naive loop.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ matmul */

/* A = [[1,2,3],[4,5,6]], B = [[7,8],[9,10],[11,12]]: AB = [[58,64],[139,154]]
 */
START_TEST(test_matmul_2d) {
    for (int di = 0; di < 2; di++) {
        const double *exp = D(58, 64, 139, 154);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                fw f;
                char what[64];
                fw_begin(&f, th_dtypes[di]);
                mg_tensor a = ta ? fw_in(&f, 2, S(3, 2), D(1, 4, 2, 5, 3, 6))
                                 : fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
                mg_tensor b =
                    tb ? fw_in(&f, 2, S(2, 3), D(7, 9, 11, 8, 10, 12))
                       : fw_in(&f, 2, S(3, 2), D(7, 8, 9, 10, 11, 12));
                snprintf(what, sizeof what, "matmul 2-D trans_a=%d trans_b=%d",
                         ta, tb);
                fw_check(&f, what, mg_matmul(f.g, a, b, ta, tb), 2, S(2, 2),
                         exp);
                fw_end(&f);
            }
        /* non-square: [1,3] x [3,1] = 1*7+2*9+3*11 = 58 ; [3,1]x[1,2] */
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor r = fw_in(&f, 2, S(1, 3), D(1, 2, 3));
        mg_tensor c = fw_in(&f, 2, S(3, 1), D(7, 9, 11));
        fw_check(&f, "matmul [1,3]x[3,1]", mg_matmul(f.g, r, c, 0, 0), 2,
                 S(1, 1), D(58));
        mg_tensor u = fw_in(&f, 2, S(1, 2), D(-1, 2));
        fw_check(&f, "matmul [3,1]x[1,2]", mg_matmul(f.g, c, u, 0, 0), 2,
                 S(3, 2), D(-7, 14, -9, 18, -11, 22));
        fw_end(&f);
    }
}
END_TEST

/* a0 = [[1,2],[3,4]], a1 = [[5,6],[7,8]]; b0 = I, b1 = [[0,1],[1,0]] */
START_TEST(test_matmul_batched) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 3, S(2, 2, 2), D(1, 2, 3, 4, 5, 6, 7, 8));
        mg_tensor b = fw_in(&f, 3, S(2, 2, 2), D(1, 0, 0, 1, 0, 1, 1, 0));
        fw_check(&f, "matmul batched", mg_matmul(f.g, a, b, 0, 0), 3,
                 S(2, 2, 2), D(1, 2, 3, 4, 6, 5, 8, 7));
        /* a^T per batch: a0^T = [[1,3],[2,4]], a1^T b1 = [[5,7],[6,8]]b1 */
        fw_check(&f, "matmul batched trans_a", mg_matmul(f.g, a, b, 1, 0), 3,
                 S(2, 2, 2), D(1, 3, 2, 4, 7, 5, 8, 6));
        /* a b^T: b0^T = I, b1^T = b1 */
        fw_check(&f, "matmul batched trans_b", mg_matmul(f.g, a, b, 0, 1), 3,
                 S(2, 2, 2), D(1, 2, 3, 4, 6, 5, 8, 7));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_matmul_shared) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 3, S(2, 2, 2), D(1, 2, 3, 4, 5, 6, 7, 8));
        mg_tensor s = fw_in(&f, 2, S(2, 2), D(1, 1, 0, 2));
        /* a_i [[1,1],[0,2]] */
        fw_check(&f, "matmul batched x shared 2-D b",
                 mg_matmul(f.g, a, s, 0, 0), 3, S(2, 2, 2),
                 D(1, 5, 3, 11, 5, 17, 7, 23));
        /* [[1,1],[0,2]] b_i with b_i = a_i */
        fw_check(&f, "matmul shared 2-D a x batched",
                 mg_matmul(f.g, s, a, 0, 0), 3, S(2, 2, 2),
                 D(4, 6, 6, 8, 12, 14, 14, 16));
        /* a_i s^T, s^T = [[1,0],[1,2]] */
        fw_check(&f, "matmul batched x shared 2-D b, trans_b",
                 mg_matmul(f.g, a, s, 0, 1), 3, S(2, 2, 2),
                 D(3, 4, 7, 8, 11, 12, 15, 16));
        fw_end(&f);
    }
}
END_TEST

/* naive reference: mode 0 both 2-D, 1 both batched, 2 b shared, 3 a shared */
static void ref_matmul(const double *a, const double *b, double *c,
                       int64_t batch, int64_t M, int64_t K, int64_t N, int ta,
                       int tb, int a_batched, int b_batched) {
    for (int64_t z = 0; z < batch; z++) {
        const double *az = a + (a_batched ? z * M * K : 0);
        const double *bz = b + (b_batched ? z * K * N : 0);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = ta ? az[k * M + i] : az[i * K + k];
                    double bv = tb ? bz[j * K + k] : bz[k * N + j];
                    s += av * bv;
                }
                c[z * M * N + i * N + j] = s;
            }
    }
}

START_TEST(test_matmul_random_ref) {
    th_rng r;
    th_rng_init(&r, 77);
    const int64_t M = 5, K = 7, N = 3;
    const int64_t B0 = 2, B1 = 3, batch = B0 * B1;
    double *a = malloc(sizeof(double) * batch * M * K);
    double *b = malloc(sizeof(double) * batch * K * N);
    double *e = malloc(sizeof(double) * batch * M * N);
    ck_assert(a && b && e);
    th_rand_vals(&r, a, batch * M * K, -1, 1);
    th_rand_vals(&r, b, batch * K * N, -1, 1);
    for (int di = 0; di < 2; di++)
        for (int mode = 0; mode < 4; mode++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    int ab = mode == 1 || mode == 2,
                        bb = mode == 1 || mode == 3;
                    int64_t nb = mode == 0 ? 1 : batch;
                    fw f;
                    char what[96];
                    fw_begin(&f, th_dtypes[di]);
                    int64_t ash[4] = {B0, B1, ta ? K : M, ta ? M : K};
                    int64_t bsh[4] = {B0, B1, tb ? N : K, tb ? K : N};
                    mg_tensor ta_ =
                        ab ? fw_in(&f, 4, ash, a) : fw_in(&f, 2, ash + 2, a);
                    mg_tensor tb_ =
                        bb ? fw_in(&f, 4, bsh, b) : fw_in(&f, 2, bsh + 2, b);
                    ref_matmul(a, b, e, nb, M, K, N, ta, tb, ab, bb);
                    snprintf(what, sizeof what,
                             "matmul random mode=%d (a %s, b %s) ta=%d tb=%d",
                             mode, ab ? "[2,3,.,.]" : "2-D",
                             bb ? "[2,3,.,.]" : "2-D", ta, tb);
                    mg_tensor y = mg_matmul(f.g, ta_, tb_, ta, tb);
                    if (mode == 0) fw_check_tol(&f, what, y, 2, S(M, N), e, 4);
                    else fw_check_tol(&f, what, y, 4, S(B0, B1, M, N), e, 4);
                    fw_end(&f);
                }
    free(a);
    free(b);
    free(e);
}
END_TEST

TH_PART(ops_matmul_tcase, "matmul", 0, test_matmul_2d, test_matmul_batched,
        test_matmul_shared, test_matmul_random_ref)
