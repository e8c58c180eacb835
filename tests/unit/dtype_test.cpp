// Units of the dtype table (libcommon/dtype.hpp): names, aliases, sizes, kinds, and an unknown dtype
// being an error in every user (safetensors, the plan's scratch and buffers, the task's tensors).
#include <doctest/doctest.h>

#include <string>

#include "libcommon/bundle/plan.hpp"
#include "libcommon/dtype.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/safetensors.hpp"

using namespace ca;

TEST_CASE("dtype table: aliases normalize to the safetensors name") {
  CHECK(normalize_dtype("float32") == "F32");
  CHECK(normalize_dtype("torch.float32") == "F32");
  CHECK(normalize_dtype("fp32") == "F32");
  CHECK(normalize_dtype("f32") == "F32");
  CHECK(normalize_dtype("F32") == "F32");
  CHECK(normalize_dtype("float") == "F32");
  CHECK(normalize_dtype("bf16") == "BF16");
  CHECK(normalize_dtype("torch.bfloat16") == "BF16");
  CHECK(normalize_dtype("half") == "F16");
  CHECK(normalize_dtype("double") == "F64");
  CHECK(normalize_dtype("long") == "I64");
  CHECK(normalize_dtype("int") == "I32");
  CHECK(normalize_dtype("uint8") == "U8");
  CHECK(normalize_dtype("bool") == "BOOL");
  CHECK(normalize_dtype("float8_e4m3fn") == "F8_E4M3");
  CHECK(normalize_dtype("F8_E5M2") == "F8_E5M2");
  CHECK(normalize_dtype("complex64") == "");
  CHECK(normalize_dtype("") == "");
  CHECK(find_dtype("float33") == nullptr);
}

TEST_CASE("dtype table: sizes and kinds of every canonical name") {
  for (const auto& name : dtype_names()) {
    const DtypeInfo* d = dtype_info(name);
    REQUIRE(d != nullptr);
    CHECK(normalize_dtype(name) == name);  // a canonical name is its own alias
    CHECK(d->bytes >= 1);
    CHECK(Tensor::dtype_size(name) == d->bytes);  // safetensors asks the same table
  }
  CHECK(dtype_bytes("F64") == 8);
  CHECK(dtype_bytes("F32") == 4);
  CHECK(dtype_bytes("BF16") == 2);
  CHECK(dtype_bytes("F16") == 2);
  CHECK(dtype_bytes("I64") == 8);
  CHECK(dtype_bytes("U16") == 2);
  CHECK(dtype_bytes("BOOL") == 1);
  CHECK(dtype_bytes("F8_E4M3") == 1);
  CHECK(dtype_is_float("BF16"));
  CHECK(dtype_is_float("F8_E5M2"));
  CHECK_FALSE(dtype_is_float("I32"));
  CHECK_FALSE(dtype_is_float("BOOL"));
  CHECK(dtype_info("f32") == nullptr);  // aliases are for find_dtype, not the canonical lookup
}

TEST_CASE("dtype table: an unknown dtype is an error, never 4 bytes") {
  CHECK_THROWS_AS(dtype_bytes("X32"), DtypeError);
  CHECK_THROWS_AS(dtype_is_float(""), DtypeError);
  CHECK_THROWS_AS(Tensor::dtype_size("X32"), InputError);
  CHECK_THROWS_AS(Tensor::zeros("complex64", {2}), InputError);

  bundle::TensorSpec t;
  t.name = "x";
  t.dtype = "X32";
  t.shape = {4};
  CHECK_THROWS_WITH_AS(t.bytes(), "x: unknown dtype 'X32'", bundle::PlanError);
  t.dtype = "BF16";
  CHECK(t.bytes() == 8);
}

TEST_CASE("dtype table: an unknown dtype in a plan's scratch or buffers is a plan error naming it") {
  const std::string forward = "forward:\n  - launch: k\n    grid: [1]\n    block: [1]\n    args: [outputs.0]\n";
  CHECK_THROWS_WITH_AS(bundle::Plan::parse_text("scratch:\n  tmp: {dtype: float33, shape: [4]}\n" + forward),
                       doctest::Contains("scratch.tmp: unknown dtype 'float33'"), bundle::PlanError);
  CHECK_THROWS_WITH_AS(bundle::Plan::parse_text("buffers:\n  scratch.acc:\n    dtype: complex64\n    shape: [N]\n" + forward),
                       doctest::Contains("scratch.acc: unknown dtype 'complex64'"), bundle::PlanError);
  // The JSON form of the plan takes the same path.
  Json plan = Json::parse(R"({"scratch": {"w": {"dtype": "int4", "shape": [2]}},
                                  "forward": [{"launch": "k", "grid": [1], "block": [1], "args": ["outputs.0"]}]})");
  CHECK_THROWS_WITH_AS(bundle::Plan::parse(plan), doctest::Contains("scratch.w: unknown dtype 'int4'"), bundle::PlanError);
  // The message lists the names a plan may use.
  CHECK_THROWS_WITH_AS(bundle::Plan::parse(plan), doctest::Contains("float32, float16, bfloat16, int32, int64"), bundle::PlanError);
  // Known aliases are normalized.
  auto p = bundle::Plan::parse_text("scratch:\n  a: {dtype: bf16, shape: [4]}\n  b: {dtype: torch.int64, shape: [2, 3]}\n" + forward);
  REQUIRE(p.scratch.size() == 2);
  CHECK(p.scratch[0].dtype == "BF16");
  CHECK(p.scratch[1].dtype == "I64");
}

TEST_CASE("dtype table: a task tensor's dtype is normalized; an unknown one leaves the spec unknown") {
  auto io = bundle::IoSpec::from_json(Json::parse(R"({"inputs": [{"shape": [2, 3], "dtype": "torch.float16"},
                                                                  {"shape": [4], "dtype": "complex64"}],
                                                      "outputs": [{"shape": [2], "dtype": "float32"}]})"));
  REQUIRE(io.inputs.size() == 2);
  CHECK(io.inputs[0].dtype == "F16");
  CHECK(io.inputs[0].known);
  CHECK(io.inputs[0].bytes() == 12);
  CHECK_FALSE(io.inputs[1].known);
  CHECK_FALSE(io.shapes_known());
  CHECK(io.io_bytes() == 12 + 8);  // the tensors whose size is known
}
