/* A compact tree-ensemble walk for benchmarks/bench_tree_walk.py (an experiment, not the product).
 *
 * Each tree is laid out depth first, a branch's "true" (x <= value) child right after it, so one
 * node is 12 bytes and a walk reads few cache lines. The sum is a float accumulated in tree order,
 * as onnxruntime's TreeEnsembleRegressor does for float inputs with one thread.
 */
#include <math.h>
#include <stdint.h>

#define LEAF 1u         /* value is the leaf's weight */
#define MISSING_TRUE 2u /* a NaN feature takes the true branch */

typedef struct {
    float value;     /* threshold, or the leaf's weight */
    int32_t right;   /* the false child's index */
    uint16_t feature;
    uint8_t flags;
    uint8_t unused;
} node_t;

float tree_walk(const node_t *nodes, const int32_t *roots, int32_t trees, const float *x)
{
    float sum = 0.0f;
    for (int32_t t = 0; t < trees; t++) {
        int32_t i = roots[t];
        while (!(nodes[i].flags & LEAF)) {
            float v = x[nodes[i].feature];
            int go_true = isnan(v) ? (nodes[i].flags & MISSING_TRUE) != 0 : v <= nodes[i].value;
            i = go_true ? i + 1 : nodes[i].right;
        }
        sum += nodes[i].value;
    }
    return sum;
}
