/*
 * test_ops_forward.c - forward values of every public op against numbers
 * computed by hand (or, for random data, by a naive independent loop in the
 * test), in MG_F32 and MG_F64.
 */
#include "helpers.h"

/* ------------------------------------------------------------------ matmul */

/* A = [[1,2,3],[4,5,6]], B = [[7,8],[9,10],[11,12]]: AB = [[58,64],[139,154]] */
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
                    int ab = mode == 1 || mode == 2, bb = mode == 1 || mode == 3;
                    int64_t nb = mode == 0 ? 1 : batch;
                    fw f;
                    char what[96];
                    fw_begin(&f, th_dtypes[di]);
                    int64_t ash[4] = {B0, B1, ta ? K : M, ta ? M : K};
                    int64_t bsh[4] = {B0, B1, tb ? N : K, tb ? K : N};
                    mg_tensor ta_ = ab ? fw_in(&f, 4, ash, a)
                                       : fw_in(&f, 2, ash + 2, a);
                    mg_tensor tb_ = bb ? fw_in(&f, 4, bsh, b)
                                       : fw_in(&f, 2, bsh + 2, b);
                    ref_matmul(a, b, e, nb, M, K, N, ta, tb, ab, bb);
                    snprintf(what, sizeof what,
                             "matmul random mode=%d (a %s, b %s) ta=%d tb=%d",
                             mode, ab ? "[2,3,.,.]" : "2-D",
                             bb ? "[2,3,.,.]" : "2-D", ta, tb);
                    mg_tensor y = mg_matmul(f.g, ta_, tb_, ta, tb);
                    if (mode == 0)
                        fw_check_tol(&f, what, y, 2, S(M, N), e, 4);
                    else
                        fw_check_tol(&f, what, y, 4, S(B0, B1, M, N), e, 4);
                    fw_end(&f);
                }
    free(a);
    free(b);
    free(e);
}
END_TEST

/* ------------------------------------------------------------------ binary */

START_TEST(test_binary_row_broadcast) {
    /* [2,3] op [3] */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        mg_tensor b = fw_in(&f, 1, S(3), D(10, 20, 30));
        fw_check(&f, "add [2,3]+[3]", mg_add(f.g, a, b), 2, S(2, 3),
                 D(11, 22, 33, 14, 25, 36));
        fw_check(&f, "sub [2,3]-[3]", mg_sub(f.g, a, b), 2, S(2, 3),
                 D(-9, -18, -27, -6, -15, -24));
        fw_check(&f, "mul [2,3]*[3]", mg_mul(f.g, a, b), 2, S(2, 3),
                 D(10, 40, 90, 40, 100, 180));
        fw_check(&f, "div [2,3]/[3]", mg_div(f.g, a, b), 2, S(2, 3),
                 D(0.1, 0.1, 0.1, 0.4, 0.25, 0.2));
        /* reversed operand order: [3] op [2,3] */
        fw_check(&f, "sub [3]-[2,3]", mg_sub(f.g, b, a), 2, S(2, 3),
                 D(9, 18, 27, 6, 15, 24));
        fw_check(&f, "div [3]/[2,3]", mg_div(f.g, b, a), 2, S(2, 3),
                 D(10, 10, 10, 2.5, 4, 5));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_binary_outer_broadcast) {
    /* [2,1] op [1,3] -> [2,3] */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 2, S(2, 1), D(2, 3));
        mg_tensor b = fw_in(&f, 2, S(1, 3), D(1, 2, 4));
        fw_check(&f, "mul [2,1]*[1,3]", mg_mul(f.g, a, b), 2, S(2, 3),
                 D(2, 4, 8, 3, 6, 12));
        fw_check(&f, "add [2,1]+[1,3]", mg_add(f.g, a, b), 2, S(2, 3),
                 D(3, 4, 6, 4, 5, 7));
        fw_check(&f, "sub [2,1]-[1,3]", mg_sub(f.g, a, b), 2, S(2, 3),
                 D(1, 0, -2, 2, 1, -1));
        fw_check(&f, "div [2,1]/[1,3]", mg_div(f.g, a, b), 2, S(2, 3),
                 D(2, 1, 0.5, 3, 1.5, 0.75));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_binary_scalar) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 2, S(2, 2), D(1, 2, 3, 4));
        mg_tensor s = fw_in(&f, 0, NULL, D(2.5));
        fw_check(&f, "add [2,2]+scalar", mg_add(f.g, a, s), 2, S(2, 2),
                 D(3.5, 4.5, 5.5, 6.5));
        fw_check(&f, "mul scalar*[2,2]", mg_mul(f.g, s, a), 2, S(2, 2),
                 D(2.5, 5, 7.5, 10));
        fw_check(&f, "sub scalar-[2,2]", mg_sub(f.g, s, a), 2, S(2, 2),
                 D(1.5, 0.5, -0.5, -1.5));
        fw_check(&f, "div scalar/[2,2]", mg_div(f.g, s, a), 2, S(2, 2),
                 D(2.5, 1.25, 2.5 / 3.0, 0.625));
        fw_check(&f, "div [2,2]/scalar", mg_div(f.g, a, s), 2, S(2, 2),
                 D(0.4, 0.8, 1.2, 1.6));
        mg_tensor t = fw_in(&f, 0, NULL, D(-4));
        fw_check(&f, "mul scalar*scalar", mg_mul(f.g, s, t), 0, NULL,
                 D(-10));
        /* [1] (1-D of size 1) against [2,2] */
        mg_tensor o = fw_in(&f, 1, S(1), D(-1));
        fw_check(&f, "add [2,2]+[1]", mg_add(f.g, a, o), 2, S(2, 2),
                 D(0, 1, 2, 3));
        fw_end(&f);
    }
}
END_TEST

/* [3,1,4] op [2,4] -> [3,2,4], against a naive loop */
START_TEST(test_binary_3d_broadcast_ref) {
    th_rng r;
    th_rng_init(&r, 5);
    double a[12], b[8], e[24];
    th_rand_vals(&r, a, 12, -2, 2);
    th_rand_vals(&r, b, 8, 0.5, 2);
    for (int op = 0; op < 4; op++)
        for (int di = 0; di < 2; di++) {
            static const char *names[4] = {"add [3,1,4]+[2,4]",
                                           "sub [3,1,4]-[2,4]",
                                           "mul [3,1,4]*[2,4]",
                                           "div [3,1,4]/[2,4]"};
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 2; j++)
                    for (int k = 0; k < 4; k++) {
                        double x = a[i * 4 + k], y = b[j * 4 + k];
                        e[(i * 2 + j) * 4 + k] = op == 0   ? x + y
                                                 : op == 1 ? x - y
                                                 : op == 2 ? x * y
                                                           : x / y;
                    }
            fw f;
            fw_begin(&f, th_dtypes[di]);
            mg_tensor ta = fw_in(&f, 3, S(3, 1, 4), a);
            mg_tensor tb = fw_in(&f, 2, S(2, 4), b);
            mg_tensor y = op == 0   ? mg_add(f.g, ta, tb)
                          : op == 1 ? mg_sub(f.g, ta, tb)
                          : op == 2 ? mg_mul(f.g, ta, tb)
                                    : mg_div(f.g, ta, tb);
            fw_check(&f, names[op], y, 3, S(3, 2, 4), e);
            fw_end(&f);
        }
}
END_TEST

/* general numpy broadcasting vs a naive index loop, 4-D shapes */
static void unravel(int64_t idx, int nd, const int64_t *shape, int64_t *ix) {
    for (int d = nd - 1; d >= 0; d--) {
        ix[d] = idx % shape[d];
        idx /= shape[d];
    }
}

/* offset in a tensor of (nd, shape) aligned right to an out index ix[ndo] */
static int64_t bcast_off(int nd, const int64_t *shape, int ndo,
                         const int64_t *ix) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) {
        int64_t i = shape[d] == 1 ? 0 : ix[ndo - nd + d];
        off = off * shape[d] + i;
    }
    return off;
}

START_TEST(test_binary_random_broadcast_ref) {
    static const struct {
        int nda;
        int64_t sa[4];
        int ndb;
        int64_t sb[4];
        int ndo;
        int64_t so[4];
    } cases[] = {
        {4, {2, 1, 3, 1}, 3, {4, 1, 5}, 4, {2, 4, 3, 5}},
        {3, {1, 4, 1}, 4, {3, 2, 1, 5}, 4, {3, 2, 4, 5}},
        {4, {2, 3, 4, 5}, 1, {5}, 4, {2, 3, 4, 5}},
        {2, {4, 1}, 4, {2, 3, 4, 6}, 4, {2, 3, 4, 6}},
        {4, {2, 3, 4, 5}, 4, {2, 3, 4, 5}, 4, {2, 3, 4, 5}},
    };
    th_rng r;
    th_rng_init(&r, 21);
    double a[120], b[144], e[144];
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        int64_t na = th_numel(cases[k].nda, cases[k].sa);
        int64_t nb = th_numel(cases[k].ndb, cases[k].sb);
        int64_t no = th_numel(cases[k].ndo, cases[k].so);
        th_rand_vals(&r, a, na, -2, 2);
        th_rand_vals(&r, b, nb, 0.5, 2);
        for (int op = 0; op < 4; op++) {
            for (int64_t i = 0; i < no; i++) {
                int64_t ix[4];
                unravel(i, cases[k].ndo, cases[k].so, ix);
                double x = a[bcast_off(cases[k].nda, cases[k].sa,
                                       cases[k].ndo, ix)];
                double y = b[bcast_off(cases[k].ndb, cases[k].sb,
                                       cases[k].ndo, ix)];
                e[i] = op == 0   ? x + y
                       : op == 1 ? x - y
                       : op == 2 ? x * y
                                 : x / y;
            }
            for (int di = 0; di < 2; di++) {
                char what[96];
                static const char *names[4] = {"add", "sub", "mul", "div"};
                snprintf(what, sizeof what, "%s broadcast case %d", names[op],
                         k);
                fw f;
                fw_begin(&f, th_dtypes[di]);
                mg_tensor ta = fw_in(&f, cases[k].nda, cases[k].sa, a);
                mg_tensor tb = fw_in(&f, cases[k].ndb, cases[k].sb, b);
                mg_tensor y = op == 0   ? mg_add(f.g, ta, tb)
                              : op == 1 ? mg_sub(f.g, ta, tb)
                              : op == 2 ? mg_mul(f.g, ta, tb)
                                        : mg_div(f.g, ta, tb);
                fw_check(&f, what, y, cases[k].ndo, cases[k].so, e);
                fw_end(&f);
            }
        }
    }
}
END_TEST

START_TEST(test_binary_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor a = mg_input(g, "a", MG_F32, 2, S(2, 3));
    mg_tensor b = mg_input(g, "b", MG_F32, 1, S(2));
    mg_tensor c = mg_input(g, "c", MG_F64, 2, S(2, 3));
    ck_assert_msg(mg_add(g, a, b) == MG_NO_TENSOR,
                  "add [2,3]+[2] must fail (not broadcastable)");
    ck_assert_msg(mg_mul(g, a, c) == MG_NO_TENSOR,
                  "mul f32*f64 must fail (dtype)");
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------ unary */

START_TEST(test_unary) {
    const double *x = D(-2, -0.5, 0, 0.5, 1, 3);
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 2, S(2, 3), x);
        fw_check(&f, "neg", mg_neg(f.g, t), 2, S(2, 3),
                 D(2, 0.5, 0, -0.5, -1, -3));
        fw_check(&f, "relu", mg_relu(f.g, t), 2, S(2, 3),
                 D(0, 0, 0, 0.5, 1, 3));
        fw_check(&f, "gelu", mg_gelu(f.g, t), 2, S(2, 3),
                 D(-0.04540230591222494, -0.15428599017485606, 0.0,
                   0.34571400982514394, 0.8411919906082768,
                   2.996362607918227));
        fw_check(&f, "tanh", mg_tanh(f.g, t), 2, S(2, 3),
                 D(-0.9640275800758169, -0.46211715726000974, 0.0,
                   0.46211715726000974, 0.7615941559557649,
                   0.9950547536867305));
        fw_check(&f, "sigmoid", mg_sigmoid(f.g, t), 2, S(2, 3),
                 D(0.11920292202211755, 0.3775406687981454, 0.5,
                   0.6224593312018546, 0.7310585786300049,
                   0.9525741268224334));
        fw_check(&f, "exp", mg_exp(f.g, t), 2, S(2, 3),
                 D(0.1353352832366127, 0.6065306597126334, 1.0,
                   1.6487212707001282, 2.718281828459045,
                   20.085536923187668));
        fw_check(&f, "scale -1.5", mg_scale(f.g, t, -1.5), 2, S(2, 3),
                 D(3, 0.75, 0, -0.75, -1.5, -4.5));
        fw_check(&f, "scale 0", mg_scale(f.g, t, 0.0), 2, S(2, 3),
                 D(0, 0, 0, 0, 0, 0));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_unary_extremes) {
    /* saturation must not give NaN */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 1, S(4), D(-50, -20, 20, 50));
        fw_check(&f, "tanh saturated", mg_tanh(f.g, t), 1, S(4),
                 D(-1, -1, 1, 1));
        fw_check_tol(&f, "sigmoid saturated", mg_sigmoid(f.g, t), 1, S(4),
                     D(1.928749847963918e-22, 2.0611536181902037e-09,
                       0.9999999979388463, 1.0),
                     10);
        fw_check(&f, "gelu saturated", mg_gelu(f.g, t), 1, S(4),
                 D(0, 0, 20, 50));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_log_sqrt) {
    const double e1 = 2.718281828459045;
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 1, S(5), D(0.5, 1, 2, e1, 10));
        fw_check(&f, "log", mg_log(f.g, t), 1, S(5),
                 D(-0.6931471805599453, 0, 0.6931471805599453, 1,
                   2.302585092994046));
        mg_tensor s = fw_in(&f, 1, S(5), D(0.25, 1, 2, 9, 0));
        fw_check(&f, "sqrt", mg_sqrt(f.g, s), 1, S(5),
                 D(0.5, 1, 1.4142135623730951, 3, 0));
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ reductions
 * x[i,j,k] = 12i + 4j + k, shape [2,3,4] */

static const double iota24[24] = {0,  1,  2,  3,  4,  5,  6,  7,
                                  8,  9,  10, 11, 12, 13, 14, 15,
                                  16, 17, 18, 19, 20, 21, 22, 23};

START_TEST(test_sum_axes) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), iota24);
        fw_check(&f, "sum axis 0", mg_sum(f.g, x, 1, AX(0), 0), 2, S(3, 4),
                 D(12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34));
        fw_check(&f, "sum axis 1", mg_sum(f.g, x, 1, AX(1), 0), 2, S(2, 4),
                 D(12, 15, 18, 21, 48, 51, 54, 57));
        fw_check(&f, "sum axis -2", mg_sum(f.g, x, 1, AX(-2), 0), 2, S(2, 4),
                 D(12, 15, 18, 21, 48, 51, 54, 57));
        fw_check(&f, "sum axis -1", mg_sum(f.g, x, 1, AX(-1), 0), 2, S(2, 3),
                 D(6, 22, 38, 54, 70, 86));
        fw_check(&f, "sum axis -1 keepdims", mg_sum(f.g, x, 1, AX(-1), 1), 3,
                 S(2, 3, 1), D(6, 22, 38, 54, 70, 86));
        fw_check(&f, "sum axes {0,2}", mg_sum(f.g, x, 2, AX(0, 2), 0), 1,
                 S(3), D(60, 92, 124));
        fw_check(&f, "sum axes {0,-1} keepdims",
                 mg_sum(f.g, x, 2, AX(0, -1), 1), 3, S(1, 3, 1),
                 D(60, 92, 124));
        fw_check(&f, "sum axes {0,1}", mg_sum(f.g, x, 2, AX(0, 1), 0), 1,
                 S(4), D(60, 66, 72, 78));
        fw_check(&f, "sum all (naxes 0)", mg_sum(f.g, x, 0, NULL, 0), 0,
                 NULL, D(276));
        fw_check(&f, "sum all keepdims", mg_sum(f.g, x, 0, NULL, 1), 3,
                 S(1, 1, 1), D(276));
        fw_check(&f, "sum axes {0,1,2}", mg_sum(f.g, x, 3, AX(0, 1, 2), 0), 0,
                 NULL, D(276));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_sum_axes_unsorted) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), iota24);
        fw_check(&f, "sum axes {2,0} (listed out of order)",
                 mg_sum(f.g, x, 2, AX(2, 0), 0), 1, S(3), D(60, 92, 124));
        fw_check(&f, "mean axes {-1,-3} keepdims",
                 mg_mean(f.g, x, 2, AX(-1, -3), 1), 3, S(1, 3, 1),
                 D(7.5, 11.5, 15.5));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_mean_axes) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), iota24);
        fw_check(&f, "mean axis -1", mg_mean(f.g, x, 1, AX(-1), 0), 2,
                 S(2, 3), D(1.5, 5.5, 9.5, 13.5, 17.5, 21.5));
        fw_check(&f, "mean axis 1 keepdims", mg_mean(f.g, x, 1, AX(1), 1), 3,
                 S(2, 1, 4), D(4, 5, 6, 7, 16, 17, 18, 19));
        fw_check(&f, "mean axis 0", mg_mean(f.g, x, 1, AX(0), 0), 2, S(3, 4),
                 D(6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17));
        fw_check(&f, "mean axes {0,2}", mg_mean(f.g, x, 2, AX(0, 2), 0), 1,
                 S(3), D(7.5, 11.5, 15.5));
        fw_check(&f, "mean all", mg_mean(f.g, x, 0, NULL, 0), 0, NULL,
                 D(11.5));
        fw_check(&f, "mean all keepdims", mg_mean(f.g, x, 0, NULL, 1), 3,
                 S(1, 1, 1), D(11.5));
        fw_end(&f);
    }
}
END_TEST

/* every axis subset of [3,5,7], keepdims 0/1, sum and mean, against a
 * naive loop */
START_TEST(test_reduce_random_ref) {
    const int64_t sh[3] = {3, 5, 7};
    double x[105], e[105];
    th_rng r;
    th_rng_init(&r, 31);
    th_rand_vals(&r, x, 105, -2, 2);
    for (int mask = 1; mask < 8; mask++)
        for (int keep = 0; keep < 2; keep++)
            for (int mean = 0; mean < 2; mean++) {
                int axes[3], na = 0, ndo = 0;
                int64_t so[3], sk[3]; /* out shape, keepdims shape */
                int64_t cnt = 1;
                for (int d = 0; d < 3; d++) {
                    if (mask & (1 << d)) {
                        /* list as negative axes for odd masks */
                        axes[na++] = (mask & 1) ? d - 3 : d;
                        sk[d] = 1;
                        cnt *= sh[d];
                        if (keep)
                            so[ndo++] = 1;
                    } else {
                        sk[d] = sh[d];
                        so[ndo++] = sh[d];
                    }
                }
                int64_t no = th_numel(3, sk);
                for (int64_t i = 0; i < no; i++)
                    e[i] = 0;
                for (int64_t i = 0; i < 105; i++) {
                    int64_t ix[3];
                    unravel(i, 3, sh, ix);
                    e[bcast_off(3, sk, 3, ix)] += x[i];
                }
                if (mean)
                    for (int64_t i = 0; i < no; i++)
                        e[i] /= (double)cnt;
                for (int di = 0; di < 2; di++) {
                    char what[96];
                    snprintf(what, sizeof what,
                             "%s of [3,5,7] over axis mask %d keepdims %d",
                             mean ? "mean" : "sum", mask, keep);
                    fw f;
                    fw_begin(&f, th_dtypes[di]);
                    mg_tensor t = fw_in(&f, 3, sh, x);
                    mg_tensor y = mean ? mg_mean(f.g, t, na, axes, keep)
                                       : mg_sum(f.g, t, na, axes, keep);
                    fw_check_tol(&f, what, y, ndo, so, e, 20);
                    fw_end(&f);
                }
            }
}
END_TEST

START_TEST(test_reduce_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(2, 3));
    ck_assert_msg(mg_sum(g, x, 1, AX(2), 0) == MG_NO_TENSOR,
                  "sum axis 2 of a 2-D tensor must fail");
    ck_assert_msg(mg_sum(g, x, 1, AX(-3), 0) == MG_NO_TENSOR,
                  "sum axis -3 of a 2-D tensor must fail");
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------ shapes */

START_TEST(test_broadcast_to) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 1, S(3), D(1, 2, 3));
        fw_check(&f, "broadcast_to [3]->[2,3]",
                 mg_broadcast_to(f.g, a, 2, S(2, 3)), 2, S(2, 3),
                 D(1, 2, 3, 1, 2, 3));
        mg_tensor b = fw_in(&f, 2, S(2, 1), D(1, 2));
        fw_check(&f, "broadcast_to [2,1]->[2,3]",
                 mg_broadcast_to(f.g, b, 2, S(2, 3)), 2, S(2, 3),
                 D(1, 1, 1, 2, 2, 2));
        mg_tensor c = fw_in(&f, 3, S(1, 3, 1), D(1, 2, 3));
        fw_check(&f, "broadcast_to [1,3,1]->[2,3,2]",
                 mg_broadcast_to(f.g, c, 3, S(2, 3, 2)), 3, S(2, 3, 2),
                 D(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
        mg_tensor s = fw_in(&f, 0, NULL, D(7));
        fw_check(&f, "broadcast_to scalar->[2,2]",
                 mg_broadcast_to(f.g, s, 2, S(2, 2)), 2, S(2, 2),
                 D(7, 7, 7, 7));
        fw_check(&f, "broadcast_to [2,1]->[3,2,2]",
                 mg_broadcast_to(f.g, b, 3, S(3, 2, 2)), 3, S(3, 2, 2),
                 D(1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2));
        ck_assert_msg(mg_broadcast_to(f.g, a, 2, S(2, 4)) == MG_NO_TENSOR,
                      "broadcast_to [3]->[2,4] must fail");
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_reshape) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), iota24);
        fw_check(&f, "reshape [2,3,4]->[6,4]", mg_reshape(f.g, x, 2, S(6, 4)),
                 2, S(6, 4), iota24);
        fw_check(&f, "reshape [2,3,4]->[24]", mg_reshape(f.g, x, 1, S(24)), 1,
                 S(24), iota24);
        fw_check(&f, "reshape [2,3,4]->[4,1,6]",
                 mg_reshape(f.g, x, 3, S(4, 1, 6)), 3, S(4, 1, 6), iota24);
        mg_tensor s = fw_in(&f, 1, S(1), D(3.5));
        fw_check(&f, "reshape [1]->scalar", mg_reshape(f.g, s, 0, NULL), 0,
                 NULL, D(3.5));
        ck_assert_msg(mg_reshape(f.g, x, 2, S(5, 5)) == MG_NO_TENSOR,
                      "reshape 24 -> 25 elements must fail");
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_permute_transpose) {
    double e[24];
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), iota24);
        /* perm {2,0,1}: out[a,b,c] = x[b,c,a], out shape [4,2,3] */
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++)
                    e[(a * 2 + b) * 3 + c] = 12 * b + 4 * c + a;
        fw_check(&f, "permute {2,0,1}", mg_permute(f.g, x, AX(2, 0, 1)), 3,
                 S(4, 2, 3), e);
        /* perm {1,0,2}: out[a,b,c] = x[b,a,c], shape [3,2,4] */
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 4; c++)
                    e[(a * 2 + b) * 4 + c] = 12 * b + 4 * a + c;
        fw_check(&f, "permute {1,0,2}", mg_permute(f.g, x, AX(1, 0, 2)), 3,
                 S(3, 2, 4), e);
        fw_check(&f, "permute identity", mg_permute(f.g, x, AX(0, 1, 2)), 3,
                 S(2, 3, 4), iota24);
        /* transpose(0,2): out[a,b,c] = x[c,b,a], shape [4,3,2] */
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 2; c++)
                    e[(a * 3 + b) * 2 + c] = 12 * c + 4 * b + a;
        fw_check(&f, "transpose(0,2)", mg_transpose(f.g, x, 0, 2), 3,
                 S(4, 3, 2), e);
        mg_tensor m = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        fw_check(&f, "transpose 2-D", mg_transpose(f.g, m, 0, 1), 2, S(3, 2),
                 D(1, 4, 2, 5, 3, 6));
        ck_assert_msg(mg_permute(f.g, x, AX(0, 0, 1)) == MG_NO_TENSOR,
                      "permute {0,0,1} must fail");
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ softmax */

START_TEST(test_softmax_last_axis) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 1, 1, 1));
        const double *sm = D(0.09003057317038046, 0.24472847105479764,
                             0.6652409557748219, 1.0 / 3, 1.0 / 3, 1.0 / 3);
        const double *lsm =
            D(-2.4076059644443806, -1.4076059644443806, -0.4076059644443805,
              -1.0986122886681098, -1.0986122886681098, -1.0986122886681098);
        fw_check(&f, "softmax axis -1", mg_softmax(f.g, x, -1), 2, S(2, 3),
                 sm);
        fw_check(&f, "softmax axis 1", mg_softmax(f.g, x, 1), 2, S(2, 3), sm);
        fw_check(&f, "log_softmax axis -1", mg_log_softmax(f.g, x, -1), 2,
                 S(2, 3), lsm);
        fw_check(&f, "log_softmax axis 1", mg_log_softmax(f.g, x, 1), 2,
                 S(2, 3), lsm);
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_softmax_first_axis) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 1, 1, 1));
        fw_check(&f, "softmax axis 0", mg_softmax(f.g, x, 0), 2, S(2, 3),
                 D(0.5, 0.7310585786300049, 0.8807970779778823, 0.5,
                   0.2689414213699951, 0.11920292202211755));
        fw_check(&f, "log_softmax axis 0", mg_log_softmax(f.g, x, 0), 2,
                 S(2, 3),
                 D(-0.6931471805599453, -0.31326168751822286,
                   -0.1269280110429725, -0.6931471805599453,
                   -1.3132616875182228, -2.1269280110429727));
        fw_check(&f, "softmax axis -2", mg_softmax(f.g, x, -2), 2, S(2, 3),
                 D(0.5, 0.7310585786300049, 0.8807970779778823, 0.5,
                   0.2689414213699951, 0.11920292202211755));
        fw_end(&f);
    }
}
END_TEST

/* middle axis of [2,3,2] against the textbook formula */
START_TEST(test_softmax_middle_axis_ref) {
    th_rng r;
    th_rng_init(&r, 11);
    double x[12], sm[12], lsm[12];
    th_rand_vals(&r, x, 12, -3, 3);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            double s = 0;
            for (int j = 0; j < 3; j++)
                s += exp(x[(i * 3 + j) * 2 + k]);
            for (int j = 0; j < 3; j++) {
                int idx = (i * 3 + j) * 2 + k;
                sm[idx] = exp(x[idx]) / s;
                lsm[idx] = x[idx] - log(s);
            }
        }
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 3, S(2, 3, 2), x);
        fw_check_tol(&f, "softmax axis 1 of [2,3,2]", mg_softmax(f.g, t, 1),
                     3, S(2, 3, 2), sm, 2);
        fw_check_tol(&f, "log_softmax axis -2 of [2,3,2]",
                     mg_log_softmax(f.g, t, -2), 3, S(2, 3, 2), lsm, 2);
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_softmax_size1_axis) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(3, 1), D(-5, 0, 7));
        fw_check(&f, "softmax over a size-1 axis", mg_softmax(f.g, x, 1), 2,
                 S(3, 1), D(1, 1, 1));
        fw_check(&f, "log_softmax over a size-1 axis",
                 mg_log_softmax(f.g, x, -1), 2, S(3, 1), D(0, 0, 0));
        fw_end(&f);
    }
}
END_TEST

/* 4-D permutations against a naive index loop */
START_TEST(test_permute_random_ref) {
    static const int perms[4][4] = {
        {3, 1, 0, 2}, {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 3, 0, 2}};
    const int64_t sh[4] = {2, 3, 4, 5};
    double x[120], e[120];
    for (int i = 0; i < 120; i++)
        x[i] = i;
    for (int k = 0; k < 4; k++) {
        int64_t so[4];
        for (int d = 0; d < 4; d++)
            so[d] = sh[perms[k][d]];
        for (int64_t i = 0; i < 120; i++) {
            int64_t io[4], ix[4];
            unravel(i, 4, so, io);
            for (int d = 0; d < 4; d++)
                ix[perms[k][d]] = io[d];
            e[i] = x[((ix[0] * 3 + ix[1]) * 4 + ix[2]) * 5 + ix[3]];
        }
        for (int di = 0; di < 2; di++) {
            char what[64];
            snprintf(what, sizeof what, "permute {%d,%d,%d,%d} of [2,3,4,5]",
                     perms[k][0], perms[k][1], perms[k][2], perms[k][3]);
            fw f;
            fw_begin(&f, th_dtypes[di]);
            mg_tensor t = fw_in(&f, 4, sh, x);
            fw_check(&f, what, mg_permute(f.g, t, perms[k]), 4, so, e);
            fw_end(&f);
        }
    }
}
END_TEST

START_TEST(test_softmax_large_inputs) {
    /* softmax is shift invariant; a kernel must not overflow exp(1000) */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(1, 3), D(1000, 1001, 1002));
        fw_check(&f, "softmax of [1000,1001,1002]", mg_softmax(f.g, x, -1),
                 2, S(1, 3),
                 D(0.09003057317038046, 0.24472847105479764,
                   0.6652409557748219));
        fw_check(&f, "log_softmax of [1000,1001,1002]",
                 mg_log_softmax(f.g, x, -1), 2, S(1, 3),
                 D(-2.4076059644443806, -1.4076059644443806,
                   -0.4076059644443805));
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ fill */

START_TEST(test_fill) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        fw_check(&f, "fill [2,3] 2.5", mg_fill(f.g, f.dt, 2, S(2, 3), 2.5), 2,
                 S(2, 3), D(2.5, 2.5, 2.5, 2.5, 2.5, 2.5));
        fw_check(&f, "fill scalar -3", mg_fill(f.g, f.dt, 0, NULL, -3.0), 0,
                 NULL, D(-3));
        fw_check(&f, "fill [4] 0", mg_fill(f.g, f.dt, 1, S(4), 0.0), 1, S(4),
                 D(0, 0, 0, 0));
        /* fill used as an operand */
        mg_tensor x = fw_in(&f, 1, S(3), D(1, 2, 3));
        mg_tensor one = mg_fill(f.g, f.dt, 1, S(3), 1.0);
        fw_check(&f, "x + fill(1)", mg_add(f.g, x, one), 1, S(3),
                 D(2, 3, 4));
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ dropout */

#define DROP_N 100000

/* run dropout(x, p, opseed) on DROP_N values in [1,2) with run seed */
static void drop_run(mg_dtype dt, double p, uint64_t opseed,
                     uint64_t run_seed, const double *xv, double *out) {
    fw f;
    fw_begin(&f, dt);
    mg_tensor x = fw_in(&f, 1, S(DROP_N), xv);
    mg_tensor y = mg_dropout(f.g, x, p, opseed);
    fw_run(&f, "dropout", y, 1, S(DROP_N), out, run_seed);
    fw_end(&f);
}

static double *drop_input(void) {
    th_rng r;
    th_rng_init(&r, 99);
    double *x = malloc(sizeof(double) * DROP_N);
    ck_assert(x != NULL);
    th_rand_vals(&r, x, DROP_N, 1, 2);
    return x;
}

START_TEST(test_dropout_p0_identity) {
    double *x = drop_input(), *o = malloc(sizeof(double) * DROP_N);
    ck_assert(o != NULL);
    for (int di = 0; di < 2; di++) {
        drop_run(th_dtypes[di], 0.0, 3, 42, x, o);
        for (int i = 0; i < DROP_N; i++)
            ck_assert_msg(o[i] == x[i],
                          "dropout p=0 (%s): element %d is %.17g, input "
                          "%.17g",
                          mg_dtype_name(th_dtypes[di]), i, o[i], x[i]);
    }
    free(x);
    free(o);
}
END_TEST

START_TEST(test_dropout_scale_and_rate) {
    double *x = drop_input(), *o = malloc(sizeof(double) * DROP_N);
    ck_assert(o != NULL);
    const double ps[3] = {0.3, 0.5, 0.9};
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 3; pi++) {
            double p = ps[pi];
            drop_run(th_dtypes[di], p, 3, 42, x, o);
            int64_t dropped = 0;
            double rtol = th_dtypes[di] == MG_F32 ? 1e-6 : 1e-14;
            for (int i = 0; i < DROP_N; i++) {
                if (o[i] == 0.0) {
                    dropped++;
                    continue;
                }
                double e = x[i] / (1.0 - p);
                ck_assert_msg(fabs(o[i] - e) <= rtol * e,
                              "dropout p=%g (%s): kept element %d is %.17g, "
                              "expected x/(1-p) = %.17g",
                              p, mg_dtype_name(th_dtypes[di]), i, o[i], e);
            }
            double frac = (double)dropped / DROP_N;
            /* binomial std <= 0.0016 at n=1e5: 0.01 is > 6 sigma */
            ck_assert_msg(fabs(frac - p) < 0.01,
                          "dropout p=%g (%s): dropped fraction %.4f, "
                          "expected about %g",
                          p, mg_dtype_name(th_dtypes[di]), frac, p);
        }
    free(x);
    free(o);
}
END_TEST

static int64_t mask_diff(const double *a, const double *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += (a[i] == 0.0) != (b[i] == 0.0);
    return d;
}

START_TEST(test_dropout_seeds) {
    double *x = drop_input();
    double *o1 = malloc(sizeof(double) * DROP_N);
    double *o2 = malloc(sizeof(double) * DROP_N);
    ck_assert(o1 && o2);
    for (int di = 0; di < 2; di++) {
        const char *dn = mg_dtype_name(th_dtypes[di]);
        /* same run seed: bit for bit, across two plans/execs */
        drop_run(th_dtypes[di], 0.5, 3, 42, x, o1);
        drop_run(th_dtypes[di], 0.5, 3, 42, x, o2);
        ck_assert_msg(memcmp(o1, o2, sizeof(double) * DROP_N) == 0,
                      "dropout (%s): same run seed gave different outputs",
                      dn);
        /* different run seed: a different mask (about half differ) */
        drop_run(th_dtypes[di], 0.5, 3, 43, x, o2);
        int64_t d = mask_diff(o1, o2, DROP_N);
        ck_assert_msg(d > DROP_N / 4,
                      "dropout (%s): run seeds 42 and 43 give masks that "
                      "differ in only %lld of %d elements",
                      dn, (long long)d, DROP_N);
        /* different op seed, same run seed: a different mask */
        drop_run(th_dtypes[di], 0.5, 4, 42, x, o2);
        d = mask_diff(o1, o2, DROP_N);
        ck_assert_msg(d > DROP_N / 4,
                      "dropout (%s): op seeds 3 and 4 give masks that "
                      "differ in only %lld of %d elements",
                      dn, (long long)d, DROP_N);
    }
    free(x);
    free(o1);
    free(o2);
}
END_TEST

/* two dropout ops with the same attributes in one graph get their own
 * offsets, hence different masks; one run reproduces both */
START_TEST(test_dropout_two_ops_one_graph) {
    double *x = drop_input();
    double *o[4];
    for (int i = 0; i < 4; i++) {
        o[i] = malloc(sizeof(double) * DROP_N);
        ck_assert(o[i] != NULL);
    }
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor t = mg_input(g, "x", MG_F64, 1, S(DROP_N));
    mg_tensor y[2];
    y[0] = mg_dropout(g, t, 0.5, 7);
    y[1] = mg_dropout(g, t, 0.5, 7);
    TH_OK_T("dropout", y[0]);
    TH_OK_T("dropout", y[1]);
    mg_binding b = {t, x};
    void *bufs[2] = {o[0], o[1]};
    TH_RUN_OK("two dropouts", g, 2, y, bufs, 1, &b, 42);
    void *bufs2[2] = {o[2], o[3]};
    TH_RUN_OK("two dropouts again", g, 2, y, bufs2, 1, &b, 42);
    mg_graph_free(g);
    int64_t d = mask_diff(o[0], o[1], DROP_N);
    ck_assert_msg(d > DROP_N / 4,
                  "two dropout ops (same p and seed) in one graph share a "
                  "mask: only %lld of %d elements differ",
                  (long long)d, DROP_N);
    ck_assert_msg(memcmp(o[0], o[2], sizeof(double) * DROP_N) == 0 &&
                      memcmp(o[1], o[3], sizeof(double) * DROP_N) == 0,
                  "two dropout ops: a second run with the same seed differs");
    for (int i = 0; i < 4; i++)
        free(o[i]);
    free(x);
}
END_TEST

START_TEST(test_dropout_bad_p) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F32, 1, S(4));
    ck_assert_msg(mg_dropout(g, x, 1.0, 0) == MG_NO_TENSOR,
                  "dropout p=1 must fail (p in [0,1))");
    ck_assert_msg(mg_dropout(g, x, -0.1, 0) == MG_NO_TENSOR,
                  "dropout p=-0.1 must fail");
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------------ losses */

START_TEST(test_cross_entropy) {
    /* logits [[1,2,3],[1,1,1]]
     * labels [2,0]: (lse(1,2,3) - 3 + ln3) / 2 */
    const double lse0 = 3.4076059644443806, ln3 = 1.0986122886681098;
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor l = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 1, 1, 1));
        mg_tensor y1 = fw_labels(&f, 2, (const int32_t[]){2, 0});
        mg_tensor y2 = fw_labels(&f, 2, (const int32_t[]){0, 1});
        fw_check(&f, "cross_entropy labels {2,0}",
                 mg_cross_entropy(f.g, l, y1), 0, NULL,
                 D(((lse0 - 3) + ln3) / 2));
        fw_check(&f, "cross_entropy labels {0,1}",
                 mg_cross_entropy(f.g, l, y2), 0, NULL,
                 D(((lse0 - 1) + ln3) / 2));
        /* large logits: must not overflow */
        mg_tensor big = fw_in(&f, 2, S(1, 3), D(1000, 1001, 1002));
        mg_tensor y3 = fw_labels(&f, 1, (const int32_t[]){1});
        fw_check(&f, "cross_entropy large logits",
                 mg_cross_entropy(f.g, big, y3), 0, NULL,
                 D(lse0 - 2));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_cross_entropy_bad_label) {
    const int32_t bad[2][2] = {{3, 0}, {0, -1}};
    for (int k = 0; k < 2; k++) {
        mg_graph *g = mg_graph_new();
        ck_assert(g != NULL);
        float lv[6] = {1, 2, 3, 1, 1, 1};
        int32_t lab[2] = {bad[k][0], bad[k][1]};
        float out = -1;
        mg_tensor l = mg_input(g, "logits", MG_F32, 2, S(2, 3));
        mg_tensor y = mg_input(g, "labels", MG_I32, 1, S(2));
        mg_tensor ce = mg_cross_entropy(g, l, y);
        TH_OK_T("cross_entropy", ce);
        mg_binding b[2] = {{l, lv}, {y, lab}};
        void *bufs[1] = {&out};
        mg_status st = th_run(g, 1, &ce, bufs, 2, b, 0);
        mg_graph_free(g);
        ck_assert_msg(st == MG_ERR_INVALID_ARG,
                      "cross_entropy with label %d (C=3): run returned %s "
                      "(%s), expected MG_ERR_INVALID_ARG",
                      k == 0 ? 3 : -1, mg_status_str(st), th_errmsg);
    }
}
END_TEST

START_TEST(test_cross_entropy_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor l = mg_input(g, "logits", MG_F32, 2, S(2, 3));
    mg_tensor y3 = mg_input(g, "labels3", MG_I32, 1, S(3));
    mg_tensor yf = mg_input(g, "labelsf", MG_F32, 1, S(2));
    ck_assert_msg(mg_cross_entropy(g, l, y3) == MG_NO_TENSOR,
                  "cross_entropy logits [2,3] labels [3] must fail");
    ck_assert_msg(mg_cross_entropy(g, l, yf) == MG_NO_TENSOR,
                  "cross_entropy with float labels must fail");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_mse) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor p = fw_in(&f, 2, S(2, 2), D(1, 2, 3, 4));
        mg_tensor t = fw_in(&f, 2, S(2, 2), D(1.5, 2, 2, 6));
        /* diffs -0.5, 0, 1, -2 -> (0.25 + 0 + 1 + 4) / 4 */
        fw_check(&f, "mse", mg_mse(f.g, p, t), 0, NULL, D(1.3125));
        fw_check(&f, "mse(t,p)", mg_mse(f.g, t, p), 0, NULL, D(1.3125));
        fw_check(&f, "mse(p,p)", mg_mse(f.g, p, p), 0, NULL, D(0));
        mg_tensor q = fw_in(&f, 1, S(3), D(1, 2, 3));
        ck_assert_msg(mg_mse(f.g, p, q) == MG_NO_TENSOR,
                      "mse of [2,2] and [3] must fail");
        fw_end(&f);
    }
}
END_TEST

/* ------------------------------------------------------------------ binding
 * The header asks that every input the plan reads be bound; binding an input
 * that this plan happens not to read (another output's input, or a leaf a
 * gradient rule did not need) must not make the run fail. */

START_TEST(test_bind_unread_input) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    double xv[3] = {1, -2, 3}, zv[3] = {4, 5, 6}, out[3] = {0, 0, 0};
    mg_tensor x = mg_input(g, "x", MG_F64, 1, S(3));
    mg_tensor z = mg_input(g, "z", MG_F64, 1, S(3));
    mg_tensor y = mg_neg(g, x);
    TH_OK_T("neg", y);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    ck_assert_msg(mg_exec_new(NULL, &ex) == MG_OK, "%s", mg_last_error());
    mg_binding b[3] = {{x, xv}, {z, zv}, {y, out}};
    mg_status st = mg_exec_run(ex, p, b, 3, 0);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
    ck_assert_msg(st == MG_OK,
                  "plan for neg(x) with inputs x and z both bound: run "
                  "returned %s (%s); binding an input the plan does not read "
                  "should be accepted",
                  mg_status_str(st), msg);
    ck_assert_msg(out[0] == -1 && out[1] == 2 && out[2] == -3,
                  "neg: got %g %g %g", out[0], out[1], out[2]);
}
END_TEST

/* ------------------------------------------------------------------ suite */

static Suite *ops_forward_suite(void) {
    Suite *s = suite_create("ops_forward");
    TCase *tc;

    tc = tcase_create("matmul");
    tcase_add_test(tc, test_matmul_2d);
    tcase_add_test(tc, test_matmul_batched);
    tcase_add_test(tc, test_matmul_shared);
    tcase_add_test(tc, test_matmul_random_ref);
    suite_add_tcase(s, tc);

    tc = tcase_create("binary");
    tcase_add_test(tc, test_binary_row_broadcast);
    tcase_add_test(tc, test_binary_outer_broadcast);
    tcase_add_test(tc, test_binary_scalar);
    tcase_add_test(tc, test_binary_3d_broadcast_ref);
    tcase_add_test(tc, test_binary_random_broadcast_ref);
    tcase_add_test(tc, test_binary_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("unary");
    tcase_add_test(tc, test_unary);
    tcase_add_test(tc, test_unary_extremes);
    tcase_add_test(tc, test_log_sqrt);
    suite_add_tcase(s, tc);

    tc = tcase_create("reduce");
    tcase_add_test(tc, test_sum_axes);
    tcase_add_test(tc, test_sum_axes_unsorted);
    tcase_add_test(tc, test_mean_axes);
    tcase_add_test(tc, test_reduce_random_ref);
    tcase_add_test(tc, test_reduce_errors);
    suite_add_tcase(s, tc);

    tc = tcase_create("shape");
    tcase_add_test(tc, test_broadcast_to);
    tcase_add_test(tc, test_reshape);
    tcase_add_test(tc, test_permute_transpose);
    tcase_add_test(tc, test_permute_random_ref);
    suite_add_tcase(s, tc);

    tc = tcase_create("softmax");
    tcase_add_test(tc, test_softmax_last_axis);
    tcase_add_test(tc, test_softmax_first_axis);
    tcase_add_test(tc, test_softmax_middle_axis_ref);
    tcase_add_test(tc, test_softmax_large_inputs);
    tcase_add_test(tc, test_softmax_size1_axis);
    suite_add_tcase(s, tc);

    tc = tcase_create("fill");
    tcase_add_test(tc, test_fill);
    suite_add_tcase(s, tc);

    tc = tcase_create("dropout");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_dropout_p0_identity);
    tcase_add_test(tc, test_dropout_scale_and_rate);
    tcase_add_test(tc, test_dropout_seeds);
    tcase_add_test(tc, test_dropout_two_ops_one_graph);
    tcase_add_test(tc, test_dropout_bad_p);
    suite_add_tcase(s, tc);

    tc = tcase_create("loss");
    tcase_add_test(tc, test_cross_entropy);
    tcase_add_test(tc, test_cross_entropy_bad_label);
    tcase_add_test(tc, test_cross_entropy_errors);
    tcase_add_test(tc, test_mse);
    suite_add_tcase(s, tc);

    tc = tcase_create("binding");
    tcase_add_test(tc, test_bind_unread_input);
    suite_add_tcase(s, tc);

    return s;
}

int main(void) {
    return th_run_suite(ops_forward_suite());
}
