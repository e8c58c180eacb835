// Units of ppo-step's record parsing: episodes in the role/token form (ppo-step sample) and in
// agent-run's form (server prompt and completion token ids per turn), rewards, masks and bad fields.
#include <doctest/doctest.h>

#include <cmath>

#include "libcommon/errors.hpp"
#include "tools/ppo-step/records.hpp"

using namespace ca::ppo_step;

TEST_CASE("role turns: prompt, assistant, tool output, assistant") {
  auto rec = ca::Json::parse(R"({"task_id":"t1","reward":{"value":2,"scheme":"milestone"},"episode":{"turns":[
    {"role":"user","token_ids":[1,2]},
    {"role":"assistant","token_ids":[3,4],"logprobs":[-0.1,-0.2]},
    {"role":"tool","token_ids":[5],"error":true},
    {"role":"assistant","token_ids":[6],"logprobs":[-0.3]}]}})");
  auto tr = parse_episode(rec, EpisodeFields{});
  CHECK(tr.tokens == std::vector<int>{1, 2, 3, 4, 5, 6});
  CHECK(tr.mask == std::vector<double>{0, 0, 1, 1, 0, 1});
  CHECK(tr.response_start == 2);
  CHECK(tr.reward == 2.0);
  CHECK(tr.group == "t1");
  CHECK(tr.has_old_logprobs);
  CHECK(tr.old_logprobs[3] == doctest::Approx(-0.2));
  CHECK(std::isnan(tr.old_logprobs[4]));
  CHECK_FALSE(tr.clean_tool_use);
  CHECK(tr.model_tokens() == 3);
}

TEST_CASE("agent-run turns: the last context with every completion at its place") {
  auto rec = ca::Json::parse(R"({"task_id":"t","candidate_id":"c","reward":1.5,"episode":{"counts":{"malformed_calls":0},"turns":[
    {"index":0,"prompt_token_ids":[1,2],"assistant":{"content":"","tool_calls":[],"finish_reason":"tool_calls","token_ids":[3,4],"logprobs":[-1,-2]},"tool_results":[{"ok":true}]},
    {"index":1,"prompt_token_ids":[1,2,3,4,5,6],"assistant":{"content":"","tool_calls":[],"finish_reason":"stop","token_ids":[7],"logprobs":[-3]},"tool_results":[]}]}})");
  auto tr = parse_episode(rec, EpisodeFields{});
  CHECK(tr.id == "c");
  CHECK(tr.tokens == std::vector<int>{1, 2, 3, 4, 5, 6, 7});
  CHECK(tr.mask == std::vector<double>{0, 0, 1, 1, 0, 0, 1});
  CHECK(tr.response_start == 2);
  CHECK(tr.old_logprobs[6] == -3.0);
  CHECK(tr.clean_tool_use);
  // A re-rendered history (turn 0's completion is not where its prompt ends) is refused.
  rec["episode"]["turns"][1]["prompt_token_ids"] = ca::Json::parse("[1,2,9,4,5,6]");
  CHECK_THROWS_AS(parse_episode(rec, EpisodeFields{}), ca::FieldError);
  // Without the server's prompt ids there is nothing to train on.
  rec["episode"]["turns"][0].erase("prompt_token_ids");
  rec["episode"]["turns"][1].erase("prompt_token_ids");
  CHECK_THROWS_WITH_AS(parse_episode(rec, EpisodeFields{}), doctest::Contains("prompt_token_ids"), ca::FieldError);
}

TEST_CASE("bad episode fields name the field") {
  auto rec = ca::Json::parse(R"({"episode":{"turns":[{"role":"user","token_ids":[1]},{"role":"assistant","token_ids":[2]}]}})");
  CHECK_THROWS_WITH_AS(parse_episode(rec, EpisodeFields{}), doctest::Contains("reward"), ca::FieldError);
  rec["reward"] = 1;
  auto tr = parse_episode(rec, EpisodeFields{});
  CHECK_FALSE(tr.has_old_logprobs);  // recomputed by the trainer
  rec["episode"]["turns"][0]["token_ids"] = "oops";
  CHECK_THROWS_AS(parse_episode(rec, EpisodeFields{}), ca::FieldError);
  auto no_prompt = ca::Json::parse(R"({"reward":1,"episode":{"turns":[{"role":"assistant","token_ids":[2]}]}})");
  CHECK_THROWS_AS(parse_episode(no_prompt, EpisodeFields{}), ca::FieldError);
  auto custom = ca::Json::parse(R"({"score":{"r":0.5},"episode":{"turns":[{"role":"user","token_ids":[1]},{"role":"assistant","token_ids":[2]}]}})");
  EpisodeFields f;
  f.reward_pointer = "/score/r";
  CHECK(parse_episode(custom, f).reward == 0.5);
}

TEST_CASE("sequence records for `advantages`") {
  auto rec = ca::Json::parse(R"({"id":7,"group":"g","response_mask":[1,0,1],"values":[0,0,0],"reward":1})");
  auto s = parse_sequence(rec, true);
  CHECK(s.id == "7");
  CHECK(s.token_rewards == std::vector<double>{0, 0, 1});
  rec["response_mask"] = ca::Json::parse("[1,2,1]");
  CHECK_THROWS_AS(parse_sequence(rec, true), ca::FieldError);
  auto grpo_rec = ca::Json::parse(R"({"response_mask":[1,1],"token_rewards":[0.5,0.5]})");
  CHECK(parse_sequence(grpo_rec, false).values.size() == 2);
  CHECK_THROWS_AS(parse_sequence(grpo_rec, true), ca::FieldError);
}
