from thinkingbox.common import Judge, TestContext

from _checks import calls_to, state_matches

"""!
scenario: circulation_desk
"""


def test_checkout_left_hand(x, judge):
    """!
    query: Hi, I'm member M02. I'd like to borrow The Left Hand of Darkness, please.
    user_context: You are Priya Raman, member id M02. You want to borrow "The Left Hand of Darkness" by Ursula K. Le Guin today.
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: checkout_book
              parameters: {member_id: M02, book_id: B001, due_date: "2025-04-01"}
    tags: [checkout]
    """
    assert x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]


def test_return_silent_spring(x, judge):
    """!
    query: I'm bringing back Silent Spring. My member id is M02.
    user_context: You are Priya Raman (M02). You are returning your copy of "Silent Spring" by Rachel Carson.
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: return_book
              parameters: {loan_id: L0002}
    tags: [return]
    """
    assert (
        x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]
    ), "the loan was not closed as expected"


def test_renew_earthsea(x, judge):
    """!
    query: Can I keep A Wizard of Earthsea a bit longer?
    user_context: You are Daniel Okafor, member id M01 (give it when asked). You want to renew "A Wizard of Earthsea".
    history: greeting:0:wait
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: renew_loan
              parameters: {loan_id: L0001, new_due_date: "2025-04-03"}
    tags: [renewal]
    """
    assert x.effects["loans"]["golden_db_hash"] == x.effects["loans"]["result_db_hash"]


def test_renew_limit_reached(x, judge):
    """!
    query: Please renew my copy of The Structure of Scientific Revolutions, member M03.
    user_context: You are Tomás Herrera (M03). You want to renew Kuhn's "The Structure of Scientific Revolutions". If it cannot be renewed, ask why.
    init:
      loans:
        rubrics_yesno:
          - Does the assistant say that the loan cannot be renewed because it has already been renewed the maximum number of times?
    tags: [renewal, refusal]
    """
    assert x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]
    for rubric in x.effects["loans"].get("rubrics_yesno", []):
        assert judge.text_yesno(x.response, rubric), f"rubric not met: {rubric}"


def test_list_my_loans(x, judge):
    """!
    query: Which books do I have out at the moment, and when are they due? I'm M01.
    user_context: You are Daniel Okafor (M01). You only want to know what you have on loan; you do not want to change anything.
    tags: [lookup, no-change]
    """
    assert x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]


def test_new_member_borrows_calvino(x, judge):
    """!
    query: I just signed up today, my card says M05. Do you have Invisible Cities by Calvino? I'd like to take it home.
    user_context: You are Aiko Tanaka, a new member with id M05. You want to borrow "Invisible Cities".
    init:
      loans:
        state:
          members:
            - {id: M05, name: Aiko Tanaka, max_loans: 2, blocked: false}
        golden_test_case:
          tool_interactions:
            - tool: checkout_book
              parameters: {member_id: M05, book_id: B006, due_date: "2025-04-01"}
    tags: [checkout, init-rows]
    """
    assert x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]


def test_checkout_confirms_due_date(x, judge):
    """!
    query: M01 here. I'd like to borrow The Tombs of Atuan. When do I need to bring it back?
    user_context: You are Daniel Okafor (M01). You want to borrow "The Tombs of Atuan" and want to know the due date.
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: checkout_book
              parameters: {member_id: M01, book_id: B003, due_date: "2025-04-01"}
    tags: [checkout, custom-check]
    """
    # Custom body (not the native pattern): the state must match, the agent must have called checkout_book
    # exactly once, and the final answer must state the due date.
    assert state_matches(x, "loans"), x.effects["loans"]["diff"]
    assert len(calls_to(x, "checkout_book")) == 1, (
        "expected exactly one checkout_book call"
    )
    assert (
        "2025-04-01" in x.response or "April 1" in x.response or "1 April" in x.response
    ), "due date not stated"


def test_swap_kuhn_for_le_guin(x, judge):
    """!
    query: I'm returning the Kuhn book and I'd like to borrow The Left Hand of Darkness instead.
    user_context: You are Tomás Herrera, member id M03 (give it when asked). You return "The Structure of Scientific Revolutions" and borrow "The Left Hand of Darkness".
    max_user_sim_turns: 4
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: return_book
              parameters: {loan_id: L0004}
            - tool: checkout_book
              parameters: {member_id: M03, book_id: B001, due_date: "2025-04-01"}
    tags: [return, checkout, two-servers]
    """
    assert x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]
    assert (
        x.effects["catalog"]["result_db_hash"] == x.effects["catalog"]["golden_db_hash"]
    )


def test_renew_calvino_after_history(x, judge):
    """!
    query: Could you renew Invisible Cities straight away? I'll be travelling.
    user_context: You are Tomás Herrera (M03). You just borrowed "Invisible Cities" and want it renewed now.
    history: borrowed_calvino:0:t2
    init:
      loans:
        golden_test_case:
          tool_interactions:
            - tool: checkout_book
              parameters: {member_id: M03, book_id: B006, due_date: "2025-04-01"}
            - tool: renew_loan
              parameters: {loan_id: L0005, new_due_date: "2025-04-15"}
    tags: [renewal, history]
    """
    assert x.effects["loans"]["result_db_hash"] == x.effects["loans"]["golden_db_hash"]


def test_opening_hours(x, judge):
    """!
    query: When are you open?
    tags: [direct-response]
    """
    assert x.tool_direct_responses == [
        "The library is open 9:00-18:00, Monday to Saturday, and closed on Sundays."
    ], x.tool_direct_responses
