// Units for the plan language of issue 33: repeat blocks (unrolled at bind time, the index in
// every expression and offset), buffer views (launch arguments, gemm and conv operands, bounds and
// aliasing checked at bind time), cooperative and cluster launches, N-d scratch, refused keys.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "libcommon/bundle/plan.hpp"
#include "libcommon/bundle/signature.hpp"
#include "libcommon/jsonl.hpp"

using namespace ca::bundle;

namespace {

// __global__ void cell(const float* x, const float* h_prev, float* h_next, int n)
Signatures cell_sigs() { return {{"cell", *demangle_kernel("_Z4cellPKfS0_Pfi")}}; }

// An RNN-like task: x [T, B, H] in, h [B, H] out (the last step's state).
IoSpec rnn_io(int T, int B, int H) {
  return IoSpec::from_json(ca::Json::parse("{\"inputs\":[{\"shape\":[" + std::to_string(T) + "," + std::to_string(B) + "," +
                                           std::to_string(H) + "],\"dtype\":\"F32\"}],\"outputs\":[{\"shape\":[" +
                                           std::to_string(B) + "," + std::to_string(H) + "],\"dtype\":\"F32\"}]}"));
}

const char* kRecurrence = R"y(dims: {T: inputs.0.shape[0], B: inputs.0.shape[1], H: inputs.0.shape[2]}
scratch:
  hs: {dtype: float32, shape: [T + 1, B, H]}
forward:
  - repeat: T
    index: t
    steps:
      - launch: cell
        grid: [cdiv(B * H, 256)]
        block: [256]
        args: ["inputs.0[t * B * H]", "scratch.hs[t * B * H]", "scratch.hs[(t + 1) * B * H]", B * H]
  - launch: cell
    grid: [cdiv(B * H, 256)]
    block: [256]
    args: ["inputs.0[(T - 1) * B * H]", "scratch.hs[(T - 1) * B * H]", outputs.0, B * H]
)y";

// One F32 input x, one param w and one output, shapes as JSON lists ("[2,3,16]").
IoSpec io_xwo(const std::string& x, const std::string& w, const std::string& out) {
  return IoSpec::from_json(ca::Json::parse(R"j({"inputs":[{"shape":)j" + x + R"j(,"dtype":"F32"}],"params":[{"name":"w","shape":)j" + w +
                                           R"j(,"dtype":"F32"}],"outputs":[{"shape":)j" + out + R"j(,"dtype":"F32"}]})j"));
}

// x [4, 8] in, [4, 8] out, and these F32 params (name, shape as a JSON list).
IoSpec io_params(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string list;
  for (const auto& [name, shape] : params)
    list += std::string(list.empty() ? "" : ",") + R"j({"name":")j" + name + R"j(","shape":)j" + shape + R"j(,"dtype":"F32"})j";
  return IoSpec::from_json(ca::Json::parse(R"j({"inputs":[{"shape":[4,8],"dtype":"F32"}],"params":[)j" + list +
                                           R"j(],"outputs":[{"shape":[4,8],"dtype":"F32"}]})j"));
}

std::string bind_error(const std::string& plan, const Signatures& sigs, const IoSpec& io) {
  try {
    bind_plan(Plan::parse_text(plan), sigs, io);
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("repeat: a recurrence unrolled at bind time, the index in every offset") {
  Plan p = Plan::parse_text(kRecurrence);
  REQUIRE(p.loops.size() == 1);
  CHECK(p.loops[0].index == "t");
  REQUIRE(p.forward.size() == 2);  // every step that runs is in the list, the loop's too
  CHECK(p.forward[0].loops == std::vector<int>{0});
  CHECK(p.forward[0].label() == "forward step 1.1 (line 8) 'launch cell'");
  CHECK(p.kernel_names() == std::vector<std::string>{"cell"});
  BoundPlan b = bind_plan(p, cell_sigs(), rnn_io(512, 4, 64));
  REQUIRE(b.forward.size() == 513);
  const int64_t row = 4 * 64 * 4;  // bytes of one step's [B, H]
  for (int t : {0, 1, 511}) {
    CAPTURE(t);
    const auto& L = b.forward[t].launch;
    CHECK(L.args[0].offset == t * row);
    CHECK(L.args[1].offset == t * row);
    CHECK(L.args[2].offset == (t + 1) * row);
    CHECK(b.forward[t].label.find("[t=" + std::to_string(t) + "]") != std::string::npos);
  }
  CHECK(b.forward[512].launch.args[0].offset == 511 * row);
  CHECK(b.forward[512].launch.args[2].offset == 0);
  CHECK(b.buffers[b.buffer_index("scratch.hs")].shape == std::vector<int64_t>{513, 4, 64});
}

TEST_CASE("repeat: nesting, counts, limits, names") {
  const std::string nested = R"y(dims: {T: inputs.0.shape[0], B: inputs.0.shape[1], H: inputs.0.shape[2]}
forward:
  - repeat: 3
    index: l
    steps:
      - repeat: T
        index: t
        steps:
          - launch: cell
            grid: [1]
            block: [32]
            args: ["inputs.0[t * B * H]", inputs.0, outputs.0, l * 1000 + t]
)y";
  BoundPlan b = bind_plan(Plan::parse_text(nested), cell_sigs(), rnn_io(5, 2, 8));
  REQUIRE(b.forward.size() == 15);
  int32_t last = 0;
  std::memcpy(&last, b.forward[14].launch.args[3].scalar.data(), 4);
  CHECK(last == 2004);
  CHECK(b.forward[14].label.find("[l=2] [t=4]") != std::string::npos);
  // Zero iterations bind nothing from the loop (the output must still be written elsewhere).
  CHECK(bind_error(R"y(forward:
  - repeat: 0
    steps:
      - launch: cell
        grid: [1]
        block: [32]
        args: [inputs.0, inputs.0, outputs.0, 1]
  - launch: cell
    grid: [1]
    block: [32]
    args: [inputs.0, inputs.0, outputs.0, 1]
)y", cell_sigs(), rnn_io(5, 2, 8)) == "");
  const std::string one = "forward:\n  - repeat: COUNT\n    index: IDX\n    steps:\n      - launch: cell\n        grid: [1]\n"
                          "        block: [32]\n        args: [inputs.0, inputs.0, outputs.0, 1]\n";
  auto with = [&](const std::string& count, const std::string& idx) {
    std::string s = one;
    s.replace(s.find("COUNT"), 5, count);
    s.replace(s.find("IDX"), 3, idx);
    return s;
  };
  CHECK(bind_error(with("-1", "t"), cell_sigs(), rnn_io(5, 2, 8)).find("repeat count -1 is negative") != std::string::npos);
  CHECK(bind_error(with("1000000", "t"), cell_sigs(), rnn_io(5, 2, 8)).find("steps per call") != std::string::npos);
  CHECK(bind_error(with("2.5", "t"), cell_sigs(), rnn_io(5, 2, 8)).find("is not an integer") != std::string::npos);
  CHECK_THROWS_WITH_AS(Plan::parse_text(with("2", "cdiv")), doctest::Contains("is not a free identifier"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("dims: {t: 3}\n" + with("2", "t")), doctest::Contains("is also a dim"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward:\n  - repeat: 2\n    steps: []\n"), doctest::Contains("non-empty list"), PlanError);
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward:\n  - repeat: 2\n    step: []\n"), doctest::Contains("unknown key 'step'"), PlanError);
  std::string deep = "forward:\n";
  std::string indent = "  ";
  for (int d = 0; d < 9; ++d) {
    deep += indent + "- repeat: 2\n" + indent + "  index: i" + std::to_string(d) + "\n" + indent + "  steps:\n";
    indent += "    ";
  }
  deep += indent + "- launch: cell\n" + indent + "  grid: [1]\n" + indent + "  block: [1]\n" + indent +
          "  args: [inputs.0, inputs.0, outputs.0, 1]\n";
  CHECK_THROWS_WITH_AS(Plan::parse_text(deep), doctest::Contains("nested more than 8 deep"), PlanError);
}

TEST_CASE("views: bounds checked at bind time, expressions in the offset") {
  auto plan_with = [](const std::string& a0) {
    return "dims: {N: inputs.0.numel}\nforward:\n  - launch: cell\n    grid: [1]\n    block: [32]\n    args: [\"" + a0 +
           "\", inputs.0, outputs.0, 1]\n";
  };
  IoSpec io = rnn_io(4, 2, 8);  // 64 elements in, 16 out
  CHECK(bind_error(plan_with("inputs.0[N - 1]"), cell_sigs(), io) == "");
  CHECK(bind_error(plan_with("inputs.0[N]"), cell_sigs(), io).find("is outside inputs.0") != std::string::npos);  // must start at an element
  CHECK(bind_error(plan_with("inputs.0[N + 1]"), cell_sigs(), io).find("is outside inputs.0 (64 elements)") != std::string::npos);
  CHECK(bind_error(plan_with("inputs.0[0 - 1]"), cell_sigs(), io).find("is outside") != std::string::npos);
  CHECK(bind_error(plan_with("inputs.0[unknown]"), cell_sigs(), io).find("unbound name 'unknown'") != std::string::npos);
  // `inputs.0.shape[1]` stays an expression (a scalar argument), not a view.
  BoundPlan b = bind_plan(Plan::parse_text("forward:\n  - launch: cell\n    grid: [1]\n    block: [32]\n"
                                           "    args: [inputs.0, inputs.0, outputs.0, inputs.0.shape[1]]\n"),
                          cell_sigs(), io);
  CHECK(b.forward[0].launch.args[3].buffer == -1);
}

TEST_CASE("gemm on views: concatenation by offsets, sizes required, aliasing refused") {
  // out [8, 32] = [x1 @ w1 | ...]: the first half of a scratch row block, as a concat would.
  IoSpec io = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[8,16],"dtype":"F32"}],"params":[{"name":"w","shape":[16,16],"dtype":"F32"}],"outputs":[{"shape":[8,32],"dtype":"F32"}]})j"));
  const std::string good = R"y(scratch:
  cat: {dtype: float32, shape: [2, 8, 16]}
forward:
  - gemm: {a: inputs.0, b: params.w, out: "scratch.cat[8 * 16]", m: 8, n: 16, k: 16}
  - gemm: {a: "scratch.cat[8 * 16]", b: params.w, out: outputs.0, m: 8, n: 16, k: 16}
)y";
  BoundPlan b = bind_plan(Plan::parse_text(good), {}, io);
  CHECK(b.forward[0].gemm.out_offset == 8 * 16 * 4);
  CHECK(b.forward[1].gemm.a_offset == 8 * 16 * 4);
  std::string no_sizes = good;
  no_sizes.replace(no_sizes.find(", m: 8, n: 16, k: 16}"), 21, "}");
  CHECK(bind_error(no_sizes, {}, io).find("needs m, n and k") != std::string::npos);
  std::string past = good;
  past.replace(past.find("scratch.cat[8 * 16]\", m"), 19, "scratch.cat[8 * 17]");
  CHECK(bind_error(past, {}, io).find("does not fit the buffers") != std::string::npos);
  const std::string alias = "scratch:\n  s: {dtype: float32, shape: [512]}\nforward:\n"
                            "  - gemm: {a: \"scratch.s[0]\", b: params.w, out: \"scratch.s[64]\", m: 8, n: 16, k: 16}\n"
                            "  - gemm: {a: inputs.0, b: params.w, out: outputs.0, m: 8, n: 16, k: 16}\n";
  CHECK(bind_error(alias, {}, io).find("out overlaps a or b") != std::string::npos);
  // The bias is read (as out's type) while out is written: its dtype is out's, and it stays apart from out.
  const std::string bias_in_out = "scratch:\n  s: {dtype: float32, shape: [512]}\nforward:\n"
                                  "  - gemm: {a: inputs.0, b: params.w, bias: \"scratch.s[120]\", out: \"scratch.s[0]\", m: 8, n: 16, k: 16}\n"
                                  "  - gemm: {a: inputs.0, b: params.w, out: outputs.0, m: 8, n: 16, k: 16}\n";
  CHECK(bind_error(bias_in_out, {}, io).find("bias overlaps out (scratch.s)") != std::string::npos);
  std::string bias_after = bias_in_out;
  bias_after.replace(bias_after.find("scratch.s[120]"), 14, "scratch.s[128]");  // out is [0, 128): apart
  CHECK(bind_error(bias_after, {}, io).empty());
  std::string bias_half = bias_after;
  bias_half.replace(bias_half.find("shape: [512]}"), 13, "shape: [512]}\n  h: {dtype: float16, shape: [16]}");
  bias_half.replace(bias_half.find("\"scratch.s[128]\""), 16, "scratch.h");
  CHECK(bind_error(bias_half, {}, io).find("bias must have out's dtype (bias F16, out F32)") != std::string::npos);
  // `c` was an undocumented alias of out that passed every check: refused now.
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward:\n  - gemm: {a: inputs.0, b: params.w, c: outputs.0}\n"),
                       doctest::Contains("unknown key 'c'"), PlanError);
}

TEST_CASE("conv on views with given shapes; in-place and bad groups refused; N-d scratch") {
  IoSpec io = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[2,3,8,8],"dtype":"F32"}],"params":[{"name":"w","shape":[4,3,3,3],"dtype":"F32"}],"outputs":[{"shape":[2,8,8,8],"dtype":"F32"}]})j"));
  // Two convs writing the two halves of the output's channels (an Inception-style concat) for one image each.
  const std::string cat = R"y(scratch:
  t5: {dtype: float32, shape: [1, 2, 3, 4, 5]}
forward:
  - repeat: 2
    index: n
    steps:
      - conv: {x: "inputs.0[n * 3 * 64]", w: params.w, out: "outputs.0[n * 8 * 64]", padding: 1, shape: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3}}
      - conv: {x: "inputs.0[n * 3 * 64]", w: params.w, out: "outputs.0[n * 8 * 64 + 4 * 64]", padding: 1, shape: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3}}
)y";
  BoundPlan b = bind_plan(Plan::parse_text(cat), {}, io);
  REQUIRE(b.forward.size() == 4);
  CHECK(b.forward[3].conv.out_offset == (8 * 64 + 4 * 64) * 4);
  CHECK(b.forward[3].conv.x_offset == 3 * 64 * 4);
  CHECK(b.buffers[b.buffer_index("scratch.t5")].shape.size() == 5);
  std::string missing = cat;
  missing.replace(missing.find(", s: 3}}"), 8, "}}");
  CHECK(bind_error(missing, {}, io).find("s is missing") != std::string::npos);
  const std::string inplace = "scratch:\n  s: {dtype: float32, shape: [4096]}\nforward:\n"
                              "  - conv: {x: \"scratch.s[0]\", w: params.w, out: \"scratch.s[100]\", padding: 1, "
                              "shape: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3}}\n"
                              "  - conv: {x: inputs.0, w: params.w, out: \"outputs.0[0]\", padding: 1, "
                              "shape: {n: 2, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3}}\n";
  CHECK(bind_error(inplace, {}, io).find("out overlaps x or w") != std::string::npos);
  const std::string conv_bias_in_out = "scratch:\n  s: {dtype: float32, shape: [4096]}\nforward:\n"
                                       "  - conv: {x: inputs.0, w: params.w, bias: \"scratch.s[200]\", out: \"scratch.s[0]\", padding: 1, "
                                       "shape: {n: 1, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3}}\n"
                                       "  - conv: {x: inputs.0, w: params.w, out: \"outputs.0[0]\", padding: 1, "
                                       "shape: {n: 2, c: 3, h: 8, w: 8, k: 4, r: 3, s: 3}}\n";
  CHECK(bind_error(conv_bias_in_out, {}, io).find("bias overlaps out (scratch.s)") != std::string::npos);
  std::string conv_bias_apart = conv_bias_in_out;
  conv_bias_apart.replace(conv_bias_apart.find("scratch.s[200]"), 14, "scratch.s[256]");  // out is [0, 256)
  CHECK(bind_error(conv_bias_apart, {}, io).empty());
  const std::string groups = "forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, groups: 2, padding: 1}\n";
  CHECK(bind_error(groups, {}, io).find("has 3 input channels per group; x has 3 channels in 2 groups") != std::string::npos);
  CHECK_THROWS_WITH_AS(Plan::parse_text("scratch:\n  s: {dtype: float32, shape: [1,2,3,4,5,6,7,8,9]}\nforward:\n  - launch: k\n"
                                        "    grid: [1]\n    block: [1]\n"),
                       doctest::Contains("9 dimensions (1 to 8)"), PlanError);
}

TEST_CASE("cooperative and cluster launches") {
  const std::string base = "forward:\n  - launch: cell\n    grid: [GRID]\n    block: [128]\n    EXTRA\n"
                           "    args: [inputs.0, inputs.0, outputs.0, 1]\n";
  auto with = [&](const std::string& grid, const std::string& extra) {
    std::string s = base;
    s.replace(s.find("GRID"), 4, grid);
    s.replace(s.find("EXTRA"), 5, extra);
    return s;
  };
  IoSpec io = rnn_io(4, 2, 8);
  BoundPlan c = bind_plan(Plan::parse_text(with("132", "cooperative: true")), cell_sigs(), io);
  CHECK(c.forward[0].launch.cooperative);
  BoundPlan k = bind_plan(Plan::parse_text(with("64", "cluster: [16]")), cell_sigs(), io, LaunchLimits::for_arch("sm_90"));
  CHECK(k.forward[0].launch.cluster[0] == 16);
  CHECK(k.forward[0].launch.cluster[1] == 1);
  CHECK(bind_error(with("60", "cluster: [8]"), cell_sigs(), io).find("must be at least 1 and divide grid[0] = 60") != std::string::npos);
  CHECK(bind_error(with("64", "cluster: [32]"), cell_sigs(), io).find("a cluster of 32 blocks (at most 16") != std::string::npos);
  CHECK_THROWS_WITH_AS(bind_plan(Plan::parse_text(with("64", "cluster: [2]")), cell_sigs(), io, LaunchLimits::for_arch("sm_80")),
                       doctest::Contains("clusters need sm_90"), PlanError);
  CHECK(bind_error(with("64", "cooperative: true\n    cluster: [2]"), cell_sigs(), io).find("cooperative or has clusters, not both") !=
        std::string::npos);
}

TEST_CASE("conv 1-d, 3-d and transposed: shapes from the buffers, PyTorch's output sizes") {
  const auto io = io_xwo;
  // Conv1d(16 -> 32, k=3, stride 2, padding 1) on [4, 16, 100]: L_out = (100 + 2 - 2 - 1) / 2 + 1 = 50.
  BoundPlan c1 = bind_plan(Plan::parse_text("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, stride: 2, padding: 1}\n"), {},
                           io("[4,16,100]", "[32,16,3]", "[4,32,50]"));
  CHECK(c1.forward[0].conv.spatial == 1);
  CHECK(c1.forward[0].conv.out_size[0] == 50);
  // Conv3d(3 -> 8, k=(3,5,5), padding (1,2,2)) on [2, 3, 16, 32, 32]: same spatial size.
  BoundPlan c3 = bind_plan(Plan::parse_text("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, padding: [1, 2, 2]}\n"), {},
                           io("[2,3,16,32,32]", "[8,3,3,5,5]", "[2,8,16,32,32]"));
  CHECK(c3.forward[0].conv.spatial == 3);
  CHECK(c3.forward[0].conv.kernel[0] == 3);
  CHECK(c3.forward[0].conv.out_elements() == 2 * 8 * 16 * 32 * 32);
  // ConvTranspose3d(32 -> 16, k=3, stride 2, padding 1, output_padding 1) (KernelBench level 2's
  // shapes): D_out = (16 - 1) * 2 - 2 + 2 + 1 + 1 = 32; w is [C_in, C_out, k, k, k].
  const std::string t3 = "forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, transposed: true, stride: 2, padding: 1, "
                         "output_padding: 1}\n";
  BoundPlan ct = bind_plan(Plan::parse_text(t3), {}, io("[2,32,16,32,32]", "[32,16,3,3,3]", "[2,16,32,64,64]"));
  CHECK(ct.forward[0].conv.transposed);
  CHECK(ct.forward[0].conv.k == 16);
  CHECK(ct.forward[0].conv.out_size[2] == 64);
  CHECK(ct.forward[0].conv.w_elements() == 32 * 16 * 27);
  // Wrong output shape, wrong weight layout, output_padding too large, ranks that differ.
  CHECK(bind_error(t3, {}, io("[2,32,16,32,32]", "[32,16,3,3,3]", "[2,16,31,64,64]")).find("must be [2, 16, 32, 64, 64]") !=
        std::string::npos);
  CHECK(bind_error(t3, {}, io("[2,32,16,32,32]", "[16,32,3,3,3]", "[2,16,32,64,64]")).find("[C_in, C_out / groups, ...]") !=
        std::string::npos);
  std::string big_op = t3;
  big_op.replace(big_op.find("output_padding: 1"), 17, "output_padding: 2");
  CHECK(bind_error(big_op, {}, io("[2,32,16,32,32]", "[32,16,3,3,3]", "[2,16,33,65,65]")).find("output_padding must be smaller") !=
        std::string::npos);
  // Below dilation but not below stride: PyTorch takes it, cuDNN's backward-data cannot (refused at bind).
  std::string dil_op = big_op;
  dil_op.replace(dil_op.find("padding: 1, "), 12, "padding: 1, dilation: 3, ");
  CHECK(bind_error(dil_op, {}, io("[2,32,16,32,32]", "[32,16,3,3,3]", "[2,16,37,69,69]")).find("smaller than stride") !=
        std::string::npos);
  CHECK(bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, padding: [1, 1]}\n", {},
                   io("[2,3,16,32,32]", "[8,3,3,5,5]", "[2,8,16,32,32]"))
            .find("padding has 2 values, the convolution 3 spatial dimensions") != std::string::npos);
  CHECK(bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0}\n", {}, io("[2,3,16]", "[8,3,3,3]", "[2,8,14]"))
            .find("x, w and out of one rank") != std::string::npos);
  CHECK(bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, output_padding: 1}\n", {},
                   io("[4,16,100]", "[32,16,3]", "[4,32,98]"))
            .find("output_padding is for transposed") != std::string::npos);
}

TEST_CASE("conv fields are expressions: stride, padding, dilation, groups from dims and init values") {
  const auto io = io_xwo;
  // A depthwise 5x5 conv, stride 2 (EfficientNet's MBConv): groups = the channels, padding = k / 2.
  const std::string dw = "dims: {E: inputs.0.shape[1], K: params.w.shape[2], ST: 2}\nforward:\n"
                         "  - conv: {x: inputs.0, w: params.w, out: outputs.0, stride: ST, padding: K / 2, groups: E}\n";
  BoundPlan b = bind_plan(Plan::parse_text(dw), {}, io("[2,96,28,28]", "[96,1,5,5]", "[2,96,14,14]"));
  CHECK(b.forward[0].conv.groups == 96);
  CHECK(b.forward[0].conv.stride[0] == 2);
  CHECK(b.forward[0].conv.padding[1] == 2);
  CHECK(b.forward[0].conv.out_size[0] == 14);
  // Per-dimension lists take expressions too, and a repeat's index.
  const std::string per = "forward:\n  - repeat: 2\n    index: i\n    steps:\n"
                          "      - conv: {x: inputs.0, w: params.w, out: outputs.0, padding: [i * 0 + 1, 2 - i * 0], dilation: [1, 1 + i * 0]}\n";
  BoundPlan p = bind_plan(Plan::parse_text(per), {}, io("[1,3,16,16]", "[4,3,3,5]", "[1,4,16,16]"));
  CHECK(p.forward.size() == 2);
  CHECK(p.forward[1].conv.padding[1] == 2);
  // A value that is not a size: a float, a negative number; the message names the field and the text.
  const auto x = io("[2,96,28,28]", "[96,1,5,5]", "[2,96,14,14]");
  const std::string frac = bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, groups: 96, stride: 1.5}\n", {}, x);
  CHECK_MESSAGE(frac.find("conv stride = 1.5 ('1.5') is not a size") != std::string::npos, frac);
  const std::string neg = bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, groups: 96, padding: 1 - 3}\n", {}, x);
  CHECK_MESSAGE(neg.find("conv padding = -2 ('1 - 3') is not a size") != std::string::npos, neg);
  CHECK(bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, groups: 0}\n", {}, x).find("groups = 0") !=
        std::string::npos);
  CHECK(bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, groups: NOPE}\n", {}, x).find("NOPE") !=
        std::string::npos);
}

TEST_CASE("strided views for library steps: gemm row and batch strides, conv tensor strides") {
  const auto io = io_xwo;
  // A Linear on the two column halves of x = cat(x1, x2) [8, 2 * 16]: out = x[:, 16:] @ w^T, a view
  // of x with its row stride.
  const std::string half = "forward:\n  - gemm: {a: \"inputs.0[16]\", b: params.w, out: outputs.0, trans_b: true, m: 8, n: 4, k: 16, lda: 32}\n";
  BoundPlan g = bind_plan(Plan::parse_text(half), {}, io("[8,32]", "[4,16]", "[8,4]"));
  CHECK(g.forward[0].gemm.lda == 32);
  CHECK(g.forward[0].gemm.ldb == 16);
  CHECK(g.forward[0].gemm.ldc == 4);
  // Nine rows of that view reach past x: refused.
  std::string nine = half;
  nine.replace(nine.find("m: 8"), 4, "m: 9");
  const std::string past = bind_error(nine, {}, io("[8,32]", "[4,16]", "[9,4]"));
  CHECK_MESSAGE(past.find("does not fit the buffers") != std::string::npos, past);
  // lda smaller than the row: refused.
  std::string small = half;
  small.replace(small.find("lda: 32"), 7, "lda: 8");
  CHECK(bind_error(small, {}, io("[8,32]", "[4,16]", "[8,4]")).find("lda = 8") != std::string::npos);
  // Batched with a shared weight (stride_b 0): 3 x [8, 16] @ [16, 4]; out's batch stride 0 is refused.
  const std::string bat = "forward:\n  - gemm: {a: inputs.0, b: params.w, out: outputs.0, m: 8, n: 4, k: 16, batch: 3, stride_b: 0}\n";
  BoundPlan b = bind_plan(Plan::parse_text(bat), {}, io("[3,8,16]", "[16,4]", "[3,8,4]"));
  CHECK(b.forward[0].gemm.stride_b == 0);
  CHECK(b.forward[0].gemm.stride_a == 8 * 16);
  std::string bad = bat;
  bad.replace(bad.find("stride_b: 0"), 11, "stride_b: 0, stride_c: 0");
  const std::string twice = bind_error(bad, {}, io("[3,8,16]", "[16,4]", "[3,8,4]"));
  CHECK_MESSAGE(twice.find("twice") != std::string::npos, twice);
  // An Inception-style concat for the whole batch: a 1x1 conv writes channels [4, 8) of out [2, 8, 4, 4].
  const std::string cat = "forward:\n  - conv: {x: inputs.0, w: params.w, out: \"outputs.0[4 * 16]\", "
                          "shape: {n: 2, c: 3, h: 4, w: 4, k: 4, r: 1, s: 1}, out_strides: [8 * 16, 16, 4, 1]}\n";
  BoundPlan c = bind_plan(Plan::parse_text(cat), {}, io("[2,3,4,4]", "[4,3,1,1]", "[2,8,4,4]"));
  CHECK(c.forward[0].conv.out_strides == std::vector<int64_t>{128, 16, 4, 1});
  CHECK(c.forward[0].conv.out_offset == 4 * 16 * 4);
  // Channels [5, 9) run past out; strides that repeat an element are refused.
  std::string past8 = cat;
  past8.replace(past8.find("outputs.0[4 * 16]"), 17, "outputs.0[5 * 16]");
  const std::string reach = bind_error(past8, {}, io("[2,3,4,4]", "[4,3,1,1]", "[2,8,4,4]"));
  CHECK_MESSAGE(reach.find("reaches past") != std::string::npos, reach);
  std::string alias = cat;
  alias.replace(alias.find("[8 * 16, 16, 4, 1]"), 18, "[8 * 16, 4, 4, 1]");
  CHECK(bind_error(alias, {}, io("[2,3,4,4]", "[4,3,1,1]", "[2,8,4,4]")).find("twice") != std::string::npos);
  // A DenseNet layer in one buffer: a 1x1 conv reads channels [0, 4) and writes [4, 6) of f [2, 6, 4, 4].
  const std::string dn = "forward:\n"
                         "  - conv: {x: outputs.0, w: params.w, out: \"outputs.0[4 * 16]\", shape: {n: 2, c: 4, h: 4, w: 4, k: 2, r: 1, s: 1}, "
                         "x_strides: [96, 16, 4, 1], out_strides: [96, 16, 4, 1]}\n";
  BoundPlan d = bind_plan(Plan::parse_text(dn), {}, io("[2,6,4,4]", "[2,4,1,1]", "[2,6,4,4]"));
  CHECK(d.forward[0].conv.x_strides.size() == 4);
  // Writing channels [3, 5) instead meets the channels it reads: refused as in place.
  std::string meet = dn;
  meet.replace(meet.find("outputs.0[4 * 16]"), 17, "outputs.0[3 * 16]");
  CHECK(bind_error(meet, {}, io("[2,6,4,4]", "[2,4,1,1]", "[2,6,4,4]")).find("does not convolve in place") != std::string::npos);
  CHECK(bind_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, x_strides: [48, 16, 4]}\n", {},
                   io("[2,3,4,4]", "[4,3,1,1]", "[2,4,4,4]"))
            .find("x_strides has 3 values, the tensor 4 dimensions") != std::string::npos);
}

TEST_CASE("a repeat steps through numbered params: {expression} parts in a params name") {
  // Three Linear layers layers.0 .. layers.2 of [8, 8], then one more named differently.
  std::vector<std::pair<std::string, std::string>> params;
  for (int l = 0; l < 3; ++l)
    params.insert(params.end(), {{"layers." + std::to_string(l) + ".weight", "[8,8]"}, {"layers." + std::to_string(l) + ".bias", "[8]"}});
  const IoSpec io = io_params(params);
  const std::string plan = "scratch:\n  h: {dtype: float32, shape: [4, 4, 8]}\nforward:\n"
                           "  - gemm: {a: inputs.0, b: params.layers.0.weight, out: \"scratch.h[0]\", m: 4, n: 8, k: 8, trans_b: true}\n"
                           "  - repeat: 2\n    index: l\n    steps:\n"
                           "      - gemm: {a: \"scratch.h[l * 32]\", b: \"params.layers.{l + 1}.weight\", bias: \"params.layers.{l + 1}.bias\",\n"
                           "               out: \"scratch.h[(l + 1) * 32]\", m: 4, n: 8, k: 8, trans_b: true, activation: relu}\n"
                           "  - gemm: {a: \"scratch.h[64]\", b: params.layers.2.weight, out: outputs.0, trans_b: true, m: 4, n: 8, k: 8}\n";
  BoundPlan b = bind_plan(Plan::parse_text(plan), {}, io);
  REQUIRE(b.forward.size() == 4);
  CHECK(b.buffers[b.forward[1].gemm.b].ref == "params.layers.1.weight");
  CHECK(b.buffers[b.forward[2].gemm.b].ref == "params.layers.2.weight");
  CHECK(b.buffers[b.forward[2].gemm.bias].ref == "params.layers.2.bias");
  // One step too many: layers.3 does not exist; the message names the template and what it became.
  std::string over = plan;
  over.replace(over.find("repeat: 2"), 9, "repeat: 3");
  over.replace(over.find("shape: [4, 4, 8]"), 16, "shape: [5, 4, 8]");
  const std::string missing = bind_error(over, {}, io);
  CHECK_MESSAGE(missing.find("params.layers.{l + 1}.weight is params.layers.3.weight here, which the task does not have") !=
                    std::string::npos,
                missing);
  // A view that fits at l = 0 but not at l = 1 (h holds two layers' rows, not three): the message
  // names the iteration.
  std::string small = plan;
  small.replace(small.find("shape: [4, 4, 8]"), 16, "shape: [2, 4, 8]");
  const std::string outside = bind_error(small, {}, io);
  CHECK_MESSAGE(outside.find("reaches past scratch.h (64 elements)) (at [l=1])") != std::string::npos, outside);
  // Braces outside a params name, a bad expression in them, a negative part.
  CHECK_THROWS_WITH_AS(Plan::parse_text("forward:\n  - gemm: {a: inputs.0, b: params.layers.0.weight, out: \"scratch.h{0}\"}\n"),
                       doctest::Contains("only a params name may hold {expression} parts"), PlanError);
  CHECK_THROWS_AS(Plan::parse_text("forward:\n  - gemm: {a: inputs.0, b: \"params.layers.{l +}.weight\", out: outputs.0}\n"), PlanError);
  std::string neg = plan;
  neg.replace(neg.find("{l + 1}.weight"), 14, "{l - 1}.weight");
  CHECK(bind_error(neg, {}, io).find("= -1 is not a name part") != std::string::npos);
}

TEST_CASE("library limits at bind time: a conv view past 2^31 - 1 elements, a gemm batch past int32") {
  // 3 images of 30000 x 30000: 2.7e9 elements, past cuDNN's 2 Giga-elements; one image binds.
  const IoSpec big = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[3,1,30000,30000],"dtype":"F32"}],"params":[{"name":"w","shape":[1,1,3,3],"dtype":"F32"}],
          "outputs":[{"shape":[3,1,30000,30000],"dtype":"F32"}]})j"));
  const std::string whole = "forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, padding: 1}\n";
  CHECK(bind_error(whole, {}, big).find("conv x spans 2700000000 elements; cuDNN's tensors hold at most 2^31 - 1 (split the batch") !=
        std::string::npos);
  const std::string split = "forward:\n  - repeat: 3\n    index: i\n    steps:\n"
                            "      - conv: {x: \"inputs.0[i * 900000000]\", w: params.w, out: \"outputs.0[i * 900000000]\", padding: 1,\n"
                            "               shape: {n: 1, c: 1, h: 30000, w: 30000, k: 1, r: 3, s: 3}}\n";
  CHECK(bind_error(split, {}, big).empty());
  const IoSpec many = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[2147483648,1,1],"dtype":"F32"}],"params":[{"name":"w","shape":[1,1],"dtype":"F32"}],
          "outputs":[{"shape":[2147483648,1,1],"dtype":"F32"}]})j"));
  CHECK(bind_error("forward:\n  - gemm: {a: inputs.0, b: params.w, out: outputs.0, batch: 2147483648, m: 1, n: 1, k: 1, stride_b: 0}\n", {},
                   many)
            .find("batch = 2147483648: cuBLASLt's batch count is at most 2^31 - 1") != std::string::npos);
}

TEST_CASE("unread inputs and params: what no step names, module buffers left out (a layer count short of the task's)") {
  // Three layers and a BatchNorm-like module buffer; the plan's repeat stops one layer short.
  const IoSpec io = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[4,8],"dtype":"F32"}],"outputs":[{"shape":[4,8],"dtype":"F32"}],"params":[
        {"name":"layers.0.weight","shape":[8,8],"dtype":"F32"},{"name":"layers.1.weight","shape":[8,8],"dtype":"F32"},
        {"name":"layers.2.weight","shape":[8,8],"dtype":"F32"},{"name":"bn.running_mean","shape":[8],"dtype":"F32","buffer":true}]})j"));
  const std::string plan = "scratch:\n  h: {dtype: float32, shape: [2, 4, 8]}\nforward:\n"
                           "  - gemm: {a: inputs.0, b: params.layers.0.weight, out: \"scratch.h[0]\", m: 4, n: 8, k: 8, trans_b: true}\n"
                           "  - repeat: N\n    index: l\n    steps:\n"
                           "      - gemm: {a: \"scratch.h[(l % 2) * 32]\", b: \"params.layers.{l + 1}.weight\", out: \"scratch.h[((l + 1) % 2) * 32]\", "
                           "m: 4, n: 8, k: 8, trans_b: true}\n"
                           "  - gemm: {a: \"scratch.h[0]\", b: params.layers.0.weight, out: outputs.0, m: 4, n: 8, k: 8, trans_b: true}\n";
  auto with_n = [&](int n) {
    std::string p = plan;
    p.replace(p.find("repeat: N"), 9, "repeat: " + std::to_string(n));
    return bind_plan(Plan::parse_text(p), {}, io);
  };
  CHECK(with_n(2).unread(Space::param).empty());  // the module buffer is no Parameter: not listed
  CHECK(with_n(1).unread(Space::param) == std::vector<std::string>{"params.layers.2.weight"});
  CHECK(with_n(0).unread(Space::param) == std::vector<std::string>{"params.layers.1.weight", "params.layers.2.weight"});
  CHECK(with_n(0).unread(Space::input).empty());
  // A plan that never reads its input (the first layer reading a scratch buffer instead).
  std::string blind = plan;
  blind.replace(blind.find("repeat: N"), 9, "repeat: 2");
  blind.replace(blind.find("a: inputs.0"), 11, "a: \"scratch.h[32]\"");
  CHECK(bind_plan(Plan::parse_text(blind), {}, io).unread(Space::input) == std::vector<std::string>{"inputs.0"});
  // The worker's "buffer" flag says a param is a module buffer; on an input (a task record's word in
  // compile-only) it hides nothing.
  ca::Json flagged = io.to_json();
  flagged["inputs"][0]["buffer"] = true;
  CHECK(bind_plan(Plan::parse_text(blind), {}, IoSpec::from_json(flagged)).unread(Space::input) == std::vector<std::string>{"inputs.0"});
  // The flag survives the IoSpec's round trip (the runner gets the io as JSON).
  const IoSpec back = IoSpec::from_json(io.to_json());
  CHECK(back.params[3].module_buffer);
  CHECK_FALSE(back.params[0].module_buffer);
}

TEST_CASE("numbered params in launch arguments: resolved per iteration, dtype checked against the kernel") {
  // cell(const float* x, const float* h_prev, float* h_next, int n) with h_prev = params.w.{t}
  const IoSpec io = IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[2,16],"dtype":"F32"}],"params":[{"name":"w.0","shape":[16],"dtype":"F32"},)j"
      R"j({"name":"w.1","shape":[16],"dtype":"F32"},{"name":"w.2","shape":[16],"dtype":"I32"}],"outputs":[{"shape":[16],"dtype":"F32"}]})j"));
  const std::string plan = "forward:\n  - repeat: 2\n    index: t\n    steps:\n"
                           "      - launch: cell\n        grid: [1]\n        block: [16]\n"
                           "        args: [\"inputs.0[t * 16]\", \"params.w.{t}\", outputs.0, 16]\n";
  BoundPlan b = bind_plan(Plan::parse_text(plan), cell_sigs(), io);
  REQUIRE(b.forward.size() == 2);
  CHECK(b.buffers[b.forward[1].launch.args[1].buffer].ref == "params.w.1");
  // params.w.2 is int32: a const float* parameter does not take it.
  std::string three = plan;
  three.replace(three.find("{t}"), 3, "{t + 1}");
  const std::string why = bind_error(three, cell_sigs(), io);
  CHECK_MESSAGE(why.find("is params.w.2 (I32), kernel expects") != std::string::npos, why);
}

TEST_CASE("pick: a repeat's count and names per iteration of an outer repeat (DenseNet-like blocks)") {
  // Block 0 has 1 layer, block 1 has 2: params blocks.{b}.{l}.weight, [8, 8] each.
  const IoSpec io = io_params({{"blocks.0.0.weight", "[8,8]"}, {"blocks.1.0.weight", "[8,8]"}, {"blocks.1.1.weight", "[8,8]"}});
  const std::string plan = "scratch:\n  h: {dtype: float32, shape: [4, 8]}\nforward:\n"
                           "  - repeat: 2\n    index: b\n    steps:\n"
                           "      - repeat: pick(b, 1, 2)\n        index: l\n        steps:\n"
                           "          - gemm: {a: inputs.0, b: \"params.blocks.{b}.{l}.weight\", out: scratch.h, trans_b: true}\n"
                           "  - gemm: {a: scratch.h, b: params.blocks.1.1.weight, out: outputs.0, trans_b: true}\n";
  BoundPlan bp = bind_plan(Plan::parse_text(plan), {}, io);
  REQUIRE(bp.forward.size() == 4);
  CHECK(bp.buffers[bp.forward[0].gemm.b].ref == "params.blocks.0.0.weight");
  CHECK(bp.buffers[bp.forward[2].gemm.b].ref == "params.blocks.1.1.weight");
  std::string over = plan;
  over.replace(over.find("pick(b, 1, 2)"), 13, "pick(b, 1, 3)");
  CHECK(bind_error(over, {}, io).find("params.blocks.1.2.weight here, which the task does not have") != std::string::npos);
}
